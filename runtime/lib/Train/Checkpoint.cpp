//===- Checkpoint.cpp - Training checkpoints on disk ----------------------===//

#include "kiln/Runtime/Train/Checkpoint.h"

#include <filesystem>

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

} // namespace kiln::runtime
