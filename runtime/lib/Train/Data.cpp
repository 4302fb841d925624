//===- Data.cpp - Training tokens and deterministic batches ---------------===//

#include "kiln/Runtime/Train/Data.h"
#include "kiln/Runtime/Support/Files.h"
#include "kiln/Runtime/Init.h"

#include <algorithm>
#include <cstring>
#include <dirent.h>
#include <glob.h>
#include <sys/stat.h>

namespace kiln::runtime {

namespace {
constexpr int32_t kTokenFileMagic = 20240520;
constexpr size_t kHeaderInts = 256;

/// The largest data file read whole: 16 GiB (4 G uint32 tokens; text
/// becomes four bytes a token in memory). Larger corpora are token shards.
constexpr int64_t kMaxDataBytes = int64_t(1) << 34;

Expected<std::string> readFile(const std::string &path) {
  return readRegularFile(path, kMaxDataBytes, "data file");
}

/// Every fortune file (not the .dat indexes, not the .u8 duplicates).
Expected<std::string> readFortunes() {
  DIR *dir = opendir(kFortunesDir);
  if (!dir)
    return Error(
        std::string("the default data needs Debian's fortunes package (") +
        kFortunesDir + " is missing; scripts/bootstrap installs it)");
  std::vector<std::string> names;
  while (dirent *e = readdir(dir)) {
    std::string name = e->d_name;
    if (name[0] == '.' || name.find('.') != std::string::npos)
      continue;
    names.push_back(name);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  std::string out;
  // A fortune file that cannot be read is skipped.
  for (const std::string &name : names)
    if (Expected<std::string> text =
            readFile(std::string(kFortunesDir) + "/" + name))
      out += *text;
  return out;
}

/// The tokens of `bytes`, read from `path`: an llm.c token file's, or with
/// `text`, the bytes themselves when there is no such header. Every token
/// must be below `vocab`.
Expected<std::vector<uint32_t>> decodeTokens(const std::string &bytes,
                                             const std::string &path,
                                             int64_t vocab, bool text) {
  if (bytes.empty())
    return Error("data file '" + path + "' is empty");
  std::vector<uint32_t> tokens;
  int32_t header[3] = {0, 0, 0};
  if (bytes.size() >= sizeof header)
    std::memcpy(header, bytes.data(), sizeof header);
  if (header[0] == kTokenFileMagic) {
    int32_t version = header[1];
    int64_t count = header[2];
    size_t width = version == 1 ? 2 : version == 2 ? 4 : 0;
    if (width == 0) {
      return Error(path + ": token file version " + std::to_string(version) +
                   " is neither 1 (uint16) nor 2 (uint32)");
    }
    size_t need = kHeaderInts * 4 + static_cast<size_t>(count) * width;
    if (count <= 0 || bytes.size() < need) {
      return Error(path + ": token file is truncated (header says " +
                   std::to_string(count) + " tokens)");
    }
    tokens.resize(count);
    const char *p = bytes.data() + kHeaderInts * 4;
    for (int64_t i = 0; i < count; ++i) {
      uint32_t t = 0;
      std::memcpy(&t, p + i * width, width);
      tokens[i] = t;
    }
  } else if (text) {
    tokens.assign(bytes.begin(), bytes.end());
    for (uint32_t &t : tokens)
      t &= 0xff;
  } else {
    return Error(path + ": not a token shard (no llm.c header: magic " +
                 std::to_string(kTokenFileMagic) + ")");
  }
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] >= static_cast<uint64_t>(vocab)) {
      return Error(path + ": token " + std::to_string(tokens[i]) +
                   " at position " + std::to_string(i) +
                   " is not below the vocab size " + std::to_string(vocab));
    }
  return tokens;
}

bool isValidationShard(const std::string &path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  return name.rfind("val", 0) == 0 || name.find("_val") != std::string::npos;
}

/// The shards `path` names (a folder's `*.bin` files or a pattern's
/// matches), sorted; nothing when it is neither a folder nor a pattern.
Expected<std::vector<std::string>> shardPaths(const std::string &path,
                                              bool &isShards) {
  std::string pattern;
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    pattern = (path.back() == '/' ? path : path + "/") + "*.bin";
  else if (path.find_first_of("*?[") != std::string::npos &&
           path != kDefaultData)
    pattern = path;
  isShards = !pattern.empty();
  if (!isShards)
    return std::vector<std::string>{};
  glob_t found;
  int code = glob(pattern.c_str(), GLOB_ERR, nullptr, &found);
  std::vector<std::string> paths;
  for (size_t i = 0; code == 0 && i < found.gl_pathc; ++i)
    paths.push_back(found.gl_pathv[i]);
  globfree(&found);
  if (code == GLOB_NOMATCH || (code == 0 && paths.empty()))
    return Error(pattern == path ? "no token shards match '" + pattern + "'"
                                 : "the data folder '" + path +
                                       "' holds no token shards (*.bin)");
  if (code != 0)
    return Error("cannot list the token shards '" + pattern + "'");
  std::sort(paths.begin(), paths.end());
  return paths;
}
} // namespace

Expected<std::vector<uint32_t>> loadTokens(const std::string &path,
                                           int64_t vocab) {
  Expected<std::string> read =
      path == kDefaultData ? readFortunes() : readFile(path);
  if (!read)
    return read.takeError();
  return decodeTokens(*read, path, vocab, /*text=*/true);
}

Expected<Dataset> loadDataset(const std::string &path, int64_t vocab,
                              int64_t seqLen) {
  bool isShards = false;
  Expected<std::vector<std::string>> shards = shardPaths(path, isShards);
  if (!shards)
    return shards.takeError();
  Dataset data;
  if (!isShards) {
    Expected<std::vector<uint32_t>> tokens = loadTokens(path, vocab);
    if (!tokens)
      return tokens.takeError();
    data.tokens = std::move(*tokens);
  } else {
    // Training shards first, then validation shards.
    std::vector<uint32_t> valid;
    int64_t total = 0;
    for (const std::string &shard : *shards) {
      Expected<std::string> bytes = readFile(shard);
      if (!bytes)
        return bytes.takeError();
      total += static_cast<int64_t>(bytes->size());
      if (total > kMaxDataBytes)
        return Error("the token shards of '" + path + "' hold more than " +
                     std::to_string(kMaxDataBytes >> 30) +
                     " GiB, more than Kiln reads into memory");
      Expected<std::vector<uint32_t>> tokens =
          decodeTokens(*bytes, shard, vocab, /*text=*/false);
      if (!tokens)
        return tokens.takeError();
      bool isValid = isValidationShard(shard);
      std::vector<uint32_t> &into = isValid ? valid : data.tokens;
      into.insert(into.end(), tokens->begin(), tokens->end());
      ++(isValid ? data.validShards : data.trainShards);
    }
    if (data.trainShards == 0)
      return Error("'" + path + "' has validation shards only (" +
                   std::to_string(data.validShards) +
                   "); training shards are the ones whose names do not "
                   "start with 'val' or contain '_val'");
    if (data.validShards > 0) {
      size_t window = static_cast<size_t>(seqLen) + 1;
      data.split = {0, data.tokens.size(), data.tokens.size(),
                    data.tokens.size() + valid.size()};
      for (auto [part, count] : {std::pair{"training", data.tokens.size()},
                                 std::pair{"validation", valid.size()}})
        if (count < window)
          return Error("the " + std::string(part) + " shards of '" + path +
                       "' hold " + std::to_string(count) +
                       " tokens, fewer than one sequence of " +
                       std::to_string(seqLen) + " and its target");
      data.tokens.insert(data.tokens.end(), valid.begin(), valid.end());
      return data;
    }
  }
  Expected<Split> split = splitTokens(data.tokens.size(), seqLen);
  if (!split)
    return split.takeError();
  data.split = *split;
  return data;
}

Expected<Split> splitTokens(size_t count, int64_t seqLen) {
  Split s;
  s.trainBegin = 0;
  s.trainEnd = count - count / 10;
  s.validBegin = s.trainEnd;
  s.validEnd = count;
  size_t window = static_cast<size_t>(seqLen) + 1;
  if (s.trainEnd - s.trainBegin < window || s.validEnd - s.validBegin < window) {
    return Error(
        "the data has " + std::to_string(count) +
        " tokens: too few for a training and a validation sequence of " +
        std::to_string(seqLen) + " tokens (needs " +
        std::to_string(10 * window) + ")");
  }
  return s;
}

void fillBatch(const std::vector<uint32_t> &tokens, size_t begin, size_t end,
               int64_t batch, int64_t seqLen, uint64_t seed, uint64_t draw,
               int32_t *inputs, int32_t *targets, int64_t firstRow,
               int64_t rows) {
  size_t starts = end - begin - static_cast<size_t>(seqLen);
  uint64_t key = nameKey("batch");
  if (rows < 0)
    rows = batch - firstRow;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t b = firstRow + r;
    double u = uniformAt(seed, key, draw * static_cast<uint64_t>(batch) + b);
    size_t start = begin + std::min(starts - 1, static_cast<size_t>(u * starts));
    for (int64_t s = 0; s < seqLen; ++s) {
      inputs[r * seqLen + s] = static_cast<int32_t>(tokens[start + s]);
      targets[r * seqLen + s] = static_cast<int32_t>(tokens[start + s + 1]);
    }
  }
}

} // namespace kiln::runtime
