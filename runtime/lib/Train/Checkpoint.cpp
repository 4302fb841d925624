//===- Checkpoint.cpp - Training checkpoints on disk ----------------------===//

#include "kiln/Runtime/Train/Checkpoint.h"
#include "kiln/Runtime/Support/Files.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <set>

namespace kiln::runtime {

namespace {
std::string join(const std::string &dir, const char *file) {
  return dir.empty() || dir.back() == '/' ? dir + file : dir + "/" + file;
}

/// The step stored as decimal digits under kiln_step. `required` is false
/// for plain model files (e.g. from Hugging Face), which count as step 0.
Expected<int64_t> readStep(const std::string &path,
                           const SafetensorsContents &contents, bool required) {
  auto it = contents.metadata.find(kCheckpointStepKey);
  if (it == contents.metadata.end()) {
    if (!required)
      return 0;
    return Error(path + ": no " + kCheckpointStepKey +
                 " in the metadata (not a Kiln checkpoint file)");
  }
  const std::string &text = it->second;
  int64_t step = 0;
  // At most 18 digits: always fits in int64.
  bool ok = !text.empty() && text.size() <= 18;
  for (size_t i = 0; ok && i < text.size(); ++i) {
    ok = text[i] >= '0' && text[i] <= '9';
    step = step * 10 + (text[i] - '0');
  }
  if (!ok) {
    return Error(path + ": " + kCheckpointStepKey + " '" + text +
                 "' is not a non-negative integer");
  }
  return step;
}

/// The caller's metadata: the file's, less the keys the checkpoint owns.
std::map<std::string, std::string>
userMetadata(std::map<std::string, std::string> metadata) {
  metadata.erase(kCheckpointFormatKey);
  metadata.erase(kCheckpointStepKey);
  return metadata;
}

/// Every expected tensor present with its shape, and nothing else.
Error checkTensors(const std::string &path,
                   const std::vector<FloatTensor> &tensors,
                   const TensorShapes &expected) {
  std::map<std::string, const FloatTensor *> found;
  for (const FloatTensor &t : tensors)
    found[t.name] = &t;
  for (const auto &[name, shape] : expected) {
    auto it = found.find(name);
    if (it == found.end()) {
      return Error(path + ": tensor '" + name + "' is missing");
    }
    if (it->second->shape != shape) {
      return Error(path + ": tensor '" + name + "' has shape " +
                   shapeString(it->second->shape) + ", expected " +
                   shapeString(shape));
    }
  }
  for (const FloatTensor &t : tensors)
    if (!expected.count(t.name)) {
      return Error(path + ": unexpected tensor '" + t.name + "'");
    }
  return Error::success();
}
} // namespace

Error saveCheckpoint(const std::string &dir, const Checkpoint &checkpoint) {
  if (checkpoint.step < 0)
    return Error("cannot save checkpoint '" + dir + "': negative step " +
                 std::to_string(checkpoint.step));
  for (const char *key : {kCheckpointFormatKey, kCheckpointStepKey})
    if (checkpoint.metadata.count(key))
      return Error("cannot save checkpoint '" + dir + "': metadata key '" +
                   key + "' is reserved");
  std::map<std::string, std::string> metadata = checkpoint.metadata;
  metadata[kCheckpointFormatKey] = "pt"; // what transformers expects
  metadata[kCheckpointStepKey] = std::to_string(checkpoint.step);

  std::string modelPath = join(dir, kModelCheckpointFile);
  std::string optimizerPath = join(dir, kOptimizerCheckpointFile);
  // Bad tensors fail here, before the directory or any file is touched.
  if (Error error = checkWritable(modelPath, checkpoint.model, metadata))
    return error;
  if (Error error =
          checkWritable(optimizerPath, checkpoint.optimizer, metadata))
    return error;

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return Error("cannot create checkpoint directory '" + dir +
                 "': " + ec.message());

  // Both files are written in full before either is renamed into place, so
  // every write failure (disk full above all) leaves the old pair intact.
  // Only a failing rename between the two could leave them at different
  // steps, which loadCheckpoint detects.
  AtomicFile model(modelPath), optimizer(optimizerPath);
  if (Error error = stageSafetensors(model, checkpoint.model, metadata))
    return error;
  if (Error error = stageSafetensors(optimizer, checkpoint.optimizer, metadata))
    return error;
  // model.safetensors is renamed into place last: a folder that holds it
  // holds everything else of its step (isCompleteCheckpoint), whenever the
  // writer was killed.
  for (const auto &[name, contents] : checkpoint.files)
    if (Error error = writeFileAtomically(join(dir, name.c_str()), contents))
      return error;
  if (Error error = optimizer.commit())
    return error;
  return model.commit();
}

Expected<Checkpoint> loadCheckpoint(const std::string &dir,
                                    const TensorShapes &expectedModel,
                                    const TensorShapes &expectedOptimizer) {
  std::string modelPath = join(dir, kModelCheckpointFile);
  std::string optimizerPath = join(dir, kOptimizerCheckpointFile);
  Expected<SafetensorsContents> model = readSafetensors(modelPath);
  if (!model)
    return model.takeError();
  Expected<SafetensorsContents> optimizer = readSafetensors(optimizerPath);
  if (!optimizer)
    return optimizer.takeError();
  Expected<int64_t> modelStep = readStep(modelPath, *model, true);
  if (!modelStep)
    return modelStep.takeError();
  Expected<int64_t> optimizerStep = readStep(optimizerPath, *optimizer, true);
  if (!optimizerStep)
    return optimizerStep.takeError();
  if (*modelStep != *optimizerStep)
    return Error("checkpoint '" + dir +
                 "' is inconsistent: " + kModelCheckpointFile + " is at step " +
                 std::to_string(*modelStep) + " but " +
                 kOptimizerCheckpointFile + " at step " +
                 std::to_string(*optimizerStep) + " (an interrupted save?)");
  if (Error e = checkTensors(modelPath, model->tensors, expectedModel))
    return e;
  if (Error e =
          checkTensors(optimizerPath, optimizer->tensors, expectedOptimizer))
    return e;

  Checkpoint checkpoint;
  checkpoint.step = *modelStep;
  checkpoint.metadata = userMetadata(std::move(model->metadata));
  checkpoint.model = std::move(model->tensors);
  checkpoint.optimizer = std::move(optimizer->tensors);
  return checkpoint;
}

Expected<Checkpoint> loadModelWeights(const std::string &dir) {
  std::string modelPath = join(dir, kModelCheckpointFile);
  Expected<SafetensorsContents> model = readSafetensors(modelPath);
  if (!model)
    return model.takeError();
  Expected<int64_t> step = readStep(modelPath, *model, false);
  if (!step)
    return step.takeError();
  Checkpoint checkpoint;
  checkpoint.step = *step;
  checkpoint.metadata = userMetadata(std::move(model->metadata));
  checkpoint.model = std::move(model->tensors);
  return checkpoint;
}

namespace {
/// The shards model.safetensors.index.json at `index` lists: file -> the
/// tensors it says the file holds.
Expected<std::map<std::string, std::set<std::string>>>
readShardIndex(const std::string &index) {
  Expected<std::string> text =
      readRegularFile(index, kMaxSafetensorsHeaderBytes, "shard index");
  if (!text)
    return text.takeError();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded())
    return Error(index + ": not valid JSON");
  auto map = j.is_object() ? j.find("weight_map") : j.end();
  if (map == j.end() || !map->is_object())
    return Error(index + ": no \"weight_map\" object of tensor names to files");
  std::map<std::string, std::set<std::string>> shards;
  for (const auto &[name, file] : map->items()) {
    if (!file.is_string())
      return Error(index + ": the file of tensor '" + name +
                   "' is not a string");
    const std::string &f = file.get_ref<const std::string &>();
    // A shard is a file of the folder: no path may lead elsewhere.
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      return Error(index + ": tensor '" + name + "' names the file '" + f +
                   "', not a file of the folder");
    shards[f].insert(name);
  }
  if (shards.empty())
    return Error(index + ": the weight_map lists no tensors");
  return shards;
}
} // namespace

Expected<std::vector<FloatTensor>>
loadPretrainedWeights(const std::string &path, const TensorShapes &expected) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<FloatTensor> tensors;
  std::string where = path;
  if (!fs::is_directory(path, ec)) {
    Expected<SafetensorsContents> file = readSafetensors(path);
    if (!file)
      return file.takeError();
    tensors = std::move(file->tensors);
  } else if (std::string index = join(path, kShardIndexFile);
             fs::exists(index, ec)) {
    Expected<std::map<std::string, std::set<std::string>>> shards =
        readShardIndex(index);
    if (!shards)
      return shards.takeError();
    std::map<std::string, std::string> fileOf;
    for (const auto &[file, names] : *shards) {
      std::string shard = join(path, file.c_str());
      Expected<SafetensorsContents> contents = readSafetensors(shard);
      if (!contents)
        return contents.takeError();
      for (FloatTensor &t : contents->tensors) {
        if (!names.count(t.name))
          return Error(shard + ": holds tensor '" + t.name + "', which " +
                       kShardIndexFile + " does not place in it");
        auto [it, fresh] = fileOf.try_emplace(t.name, file);
        if (!fresh)
          return Error(path + ": tensor '" + t.name + "' is in both " +
                       it->second + " and " + file);
        tensors.push_back(std::move(t));
      }
      for (const std::string &name : names)
        if (!fileOf.count(name))
          return Error(index + ": tensor '" + name + "' is placed in " + file +
                       ", which does not hold it");
    }
    where = path + " (" + kShardIndexFile + ")";
  } else {
    std::string single = join(path, kModelCheckpointFile);
    Expected<SafetensorsContents> file = readSafetensors(single);
    if (!file)
      return file.takeError();
    tensors = std::move(file->tensors);
    where = single;
  }
  if (Error e = checkTensors(where, tensors, expected))
    return e;
  if (Error e = checkFinite(where, tensors))
    return e;
  return tensors;
}

Error checkFinite(const std::string &where,
                  const std::vector<FloatTensor> &tensors) {
  for (const FloatTensor &t : tensors)
    for (size_t e = 0; e < t.data.size(); ++e)
      if (!std::isfinite(t.data[e]))
        return Error(where + ": tensor '" + t.name + "' holds " +
                     (std::isnan(t.data[e]) ? "NaN" : "infinity") +
                     " at element " + std::to_string(e));
  return Error::success();
}

} // namespace kiln::runtime
