// Checkpoints and safetensors: bit-exact round trips, the written file
// checked against the format by a parser written here, every bad-input case
// as one error line, failed saves that leave the previous checkpoint alone,
// and the checks loading makes (steps, shapes, missing and extra tensors).
#include "kiln/Runtime/Train/Checkpoint.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace kiln::runtime;
namespace fs = std::filesystem;

namespace {
std::string readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void writeBytes(const std::string &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i)
    s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

/// A safetensors file as the format defines it, built by hand.
std::string rawFile(const std::string &header, const std::string &data) {
  return le64(header.size()) + header + data;
}

float bitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

bool sameBits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

/// Values that a lossy or text-based format would not keep.
std::vector<float> awkwardValues(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = std::nextafter(0.1f * float(i) - 0.3f, 1.0f);
  // -0, a NaN with a payload, the infinities, the smallest denormal.
  const float special[] = {-0.0f, bitsToFloat(0x7fc01234), INFINITY, -INFINITY,
                           bitsToFloat(1)};
  for (size_t i = 0; i < n && i < 5; ++i)
    v[i] = special[i];
  return v;
}

Checkpoint sampleCheckpoint(int64_t step, size_t scale = 1) {
  Checkpoint c;
  c.step = step;
  c.metadata = {{"seed", "7"}, {"model", "llama3-tiny"}};
  // Deliberately not in name order: files hold tensors in name order.
  c.model = {{"model.norm.weight", {4}, awkwardValues(4)},
             {"model.embed_tokens.weight",
              {int64_t(3 * scale), 4},
              awkwardValues(12 * scale)},
             {"model.empty", {0, 5}, {}},
             {"model.scalar", {}, {2.5f}}};
  c.optimizer = {{"exp_avg.model.norm.weight", {4}, awkwardValues(4)},
                 {"exp_avg_sq.model.norm.weight", {4}, {1, 2, 3, 4}}};
  return c;
}

TensorShapes shapesOf(const std::vector<CheckpointTensor> &tensors) {
  TensorShapes shapes;
  for (const CheckpointTensor &t : tensors)
    shapes[t.name] = t.shape;
  return shapes;
}

void expectSameTensors(std::vector<CheckpointTensor> expected,
                       const std::vector<CheckpointTensor> &actual) {
  std::sort(expected.begin(), expected.end(),
            [](const auto &a, const auto &b) { return a.name < b.name; });
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(expected[i].name, actual[i].name);
    EXPECT_EQ(expected[i].shape, actual[i].shape) << expected[i].name;
    EXPECT_TRUE(sameBits(expected[i].data, actual[i].data)) << expected[i].name;
  }
}

/// Files in `dir` whose name holds ".tmp." (left-over temporary files).
int tempFiles(const std::string &dir) {
  int count = 0;
  for (const auto &e : fs::directory_iterator(dir))
    count += e.path().filename().string().find(".tmp.") != std::string::npos;
  return count;
}

class CheckpointTest : public ::testing::Test {
protected:
  void SetUp() override {
    char pattern[] = "/tmp/kiln-checkpoint-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root = pattern;
  }
  void TearDown() override {
    // A read-only test directory must become writable again to be removed.
    std::error_code ec;
    for (const auto &e : fs::recursive_directory_iterator(root, ec))
      if (e.is_directory())
        ::chmod(e.path().c_str(), 0755);
    fs::remove_all(root, ec);
  }
  std::string path(const std::string &name) const { return root + "/" + name; }

  /// Reads a file that must fail; the error must be one line naming the
  /// file and containing `phrase`.
  void expectBad(const std::string &bytes, const std::string &phrase) {
    std::string file = path("bad.safetensors");
    writeBytes(file, bytes);
    Expected<SafetensorsContents> read = readSafetensors(file);
    EXPECT_FALSE(read) << phrase;
    const std::string &error = read.error().message();
    EXPECT_NE(error.find(phrase), std::string::npos)
        << "error '" << error << "' lacks '" << phrase << "'";
    EXPECT_NE(error.find(file), std::string::npos) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }

  std::string root;
};
} // namespace

TEST_F(CheckpointTest, RoundTripIsBitExact) {
  Checkpoint c = sampleCheckpoint(42);
  std::string dir = path("ckpt/step-42"); // the parent is created too
  ASSERT_EQ(saveCheckpoint(dir, c).message(), "");
  auto loaded = loadCheckpoint(dir, shapesOf(c.model), shapesOf(c.optimizer));
  ASSERT_TRUE(loaded) << loaded.error();
  EXPECT_EQ(loaded->step, 42);
  EXPECT_EQ(loaded->metadata, c.metadata);
  expectSameTensors(c.model, loaded->model);
  expectSameTensors(c.optimizer, loaded->optimizer);
  EXPECT_EQ(tempFiles(dir), 0);

  auto weights = loadModelWeights(dir);
  ASSERT_TRUE(weights) << weights.error();
  EXPECT_EQ(weights->step, 42);
  EXPECT_EQ(weights->metadata, c.metadata);
  expectSameTensors(c.model, weights->model);
  EXPECT_TRUE(weights->optimizer.empty());
}

TEST_F(CheckpointTest, SavingAgainReplacesTheFiles) {
  std::string dir = path("ckpt");
  ASSERT_EQ(saveCheckpoint(dir, sampleCheckpoint(1, 5)).message(), "");
  Checkpoint c = sampleCheckpoint(2);
  ASSERT_EQ(saveCheckpoint(dir, c).message(), "");
  auto loaded = loadCheckpoint(dir, shapesOf(c.model), shapesOf(c.optimizer));
  ASSERT_TRUE(loaded) << loaded.error();
  EXPECT_EQ(loaded->step, 2);
  expectSameTensors(c.model, loaded->model);
}

// The format, checked by a parser written here rather than the reader.
TEST_F(CheckpointTest, WrittenFileIsSafetensors) {
  Checkpoint c = sampleCheckpoint(42);
  ASSERT_EQ(saveCheckpoint(root, c).message(), "");
  std::string bytes = readBytes(path("model.safetensors"));
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= uint64_t(static_cast<unsigned char>(bytes[i])) << (8 * i);
  ASSERT_LE(8 + n, bytes.size());
  EXPECT_EQ((8 + n) % 8, 0u) << "the data must start 8-byte aligned";
  std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'))
      << "the header is padded with spaces only";

  nlohmann::json j = nlohmann::json::parse(header, nullptr, false);
  ASSERT_TRUE(j.is_object());
  ASSERT_TRUE(j.contains("__metadata__"));
  EXPECT_EQ(j["__metadata__"], nlohmann::json({{"format", "pt"},
                                               {"kiln_step", "42"},
                                               {"seed", "7"},
                                               {"model", "llama3-tiny"}}));

  std::vector<CheckpointTensor> sorted = c.model;
  std::sort(sorted.begin(), sorted.end(),
            [](const auto &a, const auto &b) { return a.name < b.name; });
  EXPECT_EQ(j.size(), sorted.size() + 1);
  const char *data = bytes.data() + 8 + n;
  uint64_t expectedBegin = 0;
  for (const CheckpointTensor &t : sorted) {
    ASSERT_TRUE(j.contains(t.name)) << t.name;
    const nlohmann::json &e = j[t.name];
    EXPECT_EQ(e["dtype"], "F32");
    EXPECT_EQ(e["shape"].get<std::vector<int64_t>>(), t.shape);
    auto offsets = e["data_offsets"].get<std::vector<uint64_t>>();
    ASSERT_EQ(offsets.size(), 2u);
    // Name order, contiguous, from the start of the data.
    EXPECT_EQ(offsets[0], expectedBegin) << t.name;
    EXPECT_EQ(offsets[1] - offsets[0], t.data.size() * 4) << t.name;
    if (!t.data.empty()) {
      EXPECT_EQ(
          std::memcmp(data + offsets[0], t.data.data(), t.data.size() * 4), 0)
          << t.name;
    }
    expectedBegin = offsets[1];
  }
  EXPECT_EQ(8 + n + expectedBegin, bytes.size()) << "no trailing bytes";
}

TEST_F(CheckpointTest, ReadsBf16AsFloat) {
  // 1.0, -2.0, 0.5, and 1 + 2^-7 (the bf16 next to one).
  std::string data("\x80\x3f\x00\xc0\x00\x3f\x81\x3f", 8);
  std::string header =
      R"({"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}})";
  std::string dir = path("hf");
  fs::create_directory(dir);
  writeBytes(dir + "/model.safetensors", rawFile(header, data));
  auto weights = loadModelWeights(dir);
  ASSERT_TRUE(weights) << weights.error();
  EXPECT_EQ(weights->step, 0) << "a file without kiln_step is step 0";
  ASSERT_EQ(weights->model.size(), 1u);
  EXPECT_EQ(weights->model[0].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(weights->model[0].data,
            (std::vector<float>{1.0f, -2.0f, 0.5f, 1.0f + 1.0f / 128}));
}

TEST_F(CheckpointTest, ReadsF16AsFloatExactly) {
  // 1, -2, 0.5, 1 + 2^-10, the largest half (65504), the smallest
  // subnormal (2^-24), -0 and infinity, little-endian.
  std::string data("\x00\x3c\x00\xc0\x00\x38\x01\x3c"
                   "\xff\x7b\x01\x00\x00\x80\x00\x7c",
                   16);
  std::string file = path("half.safetensors");
  writeBytes(file, rawFile(R"({"w":{"dtype":"F16","shape":[8],)"
                           R"("data_offsets":[0,16]}})",
                           data));
  auto contents = readSafetensors(file);
  ASSERT_TRUE(contents) << contents.error();
  const std::vector<float> &w = contents->tensors[0].data;
  EXPECT_EQ(w,
            (std::vector<float>{1.0f, -2.0f, 0.5f, 1.0f + 1.0f / 1024, 65504.0f,
                                std::ldexp(1.0f, -24), -0.0f, INFINITY}));
  EXPECT_TRUE(std::signbit(w[6]));
}

TEST_F(CheckpointTest, PretrainedShardsAreChecked) {
  // Two shards and their index, as save_pretrained writes them.
  std::string dir = path("sharded");
  fs::create_directory(dir);
  std::string four("\x00\x00\x80\x3f", 4);
  writeBytes(
      dir + "/a.safetensors",
      rawFile(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
              four));
  writeBytes(
      dir + "/b.safetensors",
      rawFile(R"({"y":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
              four));
  auto index = [&](const std::string &map) {
    writeBytes(dir + "/model.safetensors.index.json",
               R"({"metadata":{},"weight_map":)" + map + "}");
  };
  TensorShapes shapes = {{"x", {1}}, {"y", {1}}};
  index(R"({"x":"a.safetensors","y":"b.safetensors"})");
  auto loaded = loadPretrainedWeights(dir, shapes);
  ASSERT_TRUE(loaded) << loaded.error();
  EXPECT_EQ(loaded->size(), 2u);
  auto error = [&](const std::string &map) {
    index(map);
    auto bad = loadPretrainedWeights(dir, shapes);
    return bad ? std::string("loaded") : bad.error().message();
  };
  EXPECT_NE(error(R"({"x":"b.safetensors","y":"a.safetensors"})")
                .find("holds tensor 'x', which model.safetensors.index.json "
                      "does not place in it"),
            std::string::npos);
  EXPECT_NE(error(R"({"x":"a.safetensors","y":"a.safetensors"})")
                .find("tensor 'y' is placed in a.safetensors, which does not "
                      "hold it"),
            std::string::npos);
  EXPECT_NE(error(R"({"x":"a.safetensors","y":"../b.safetensors"})")
                .find("not a file of the folder"),
            std::string::npos);
  EXPECT_NE(error(R"({"x":"a.safetensors"})").find("tensor 'y' is missing"),
            std::string::npos)
      << "b.safetensors is not listed, so nothing is read from it";
  EXPECT_NE(error(R"([1])").find("no \"weight_map\""), std::string::npos);
  EXPECT_NE(error(R"({"x":"a.safetensors","y":"b.safetensors")")
                .find("not valid JSON"),
            std::string::npos);
}

TEST_F(CheckpointTest, AcceptsMetadataOnlyAndGaps) {
  std::string file = path("a.safetensors");
  writeBytes(file, rawFile(R"({"__metadata__":{"a":"b"}})", ""));
  auto contents = readSafetensors(file);
  ASSERT_TRUE(contents) << contents.error();
  EXPECT_TRUE(contents->tensors.empty());
  EXPECT_EQ(contents->metadata.at("a"), "b");

  // Unpadded header, a gap between tensors, a zero-size tensor inside
  // another's range: unusual but unambiguous.
  writeBytes(file,
             rawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                     R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
                     R"("c":{"dtype":"F32","shape":[0],"data_offsets":[2,2]}})",
                     std::string(12, '\0')));
  contents = readSafetensors(file);
  ASSERT_TRUE(contents) << contents.error();
  EXPECT_EQ(contents->tensors.size(), 3u);
}

TEST_F(CheckpointTest, BadFilesAreOneLineErrors) {
  std::string error =
      readSafetensors(path("missing.safetensors")).error().message();
  EXPECT_NE(error.find("cannot open"), std::string::npos) << error;
  EXPECT_NE(error.find("missing.safetensors"), std::string::npos) << error;
  error = readSafetensors(root).error().message();
  EXPECT_NE(error.find("not a regular file"), std::string::npos) << error;

  auto entry = [](const std::string &fields) {
    return R"({"w":{)" + fields + "}}";
  };
  const std::string f32 = R"("dtype":"F32",)";
  std::string eight(8, '\0');

  expectBad("", "too short");
  expectBad("\x08\x00\x00", "too short");
  expectBad(le64(64) + "{}", "larger than the file");
  expectBad(le64(uint64_t(1) << 40) + "{}", "absurd");
  expectBad(le64(~uint64_t(0)) + "{}", "absurd");
  expectBad(rawFile("{\"w\": ", ""), "not valid JSON");
  expectBad(rawFile(std::string("{}\0\0", 4), ""), "not valid JSON");
  expectBad(rawFile(std::string("{}\0{\"w\": 1}", 12), ""), "not valid JSON");
  expectBad(rawFile("[1, 2]", ""), "not a JSON object");
  expectBad(rawFile(R"({"w": 3})", ""), "entry of tensor 'w' is not an object");
  expectBad(rawFile(entry(R"("shape":[2],"data_offsets":[0,8])"), eight),
            "no dtype");
  expectBad(rawFile(entry(R"("dtype":"F64","shape":[1],"data_offsets":[0,8])"),
                    eight),
            "unsupported dtype 'F64'");
  expectBad(
      rawFile(entry(R"("dtype":"Q7","shape":[4],"data_offsets":[0,8])"), eight),
      "unsupported dtype 'Q7'");
  expectBad(
      rawFile(entry(R"("dtype":7,"shape":[4],"data_offsets":[0,8])"), eight),
      "no dtype");
  for (const char *shape : {"3", "[-2]", "[2.0]", "[\"2\"]", "[[2]]", "null"})
    expectBad(
        rawFile(entry(f32 + "\"shape\":" + shape + R"(,"data_offsets":[0,8])"),
                eight),
        "not a list of non-negative integers");
  expectBad(rawFile(entry(f32 + R"("data_offsets":[0,8])"), eight),
            "not a list of non-negative integers");
  for (const char *offsets : {"[0]", "[0,4,8]", "[-1,7]", "[0,8.0]", "{}"})
    expectBad(
        rawFile(entry(f32 + R"("shape":[2],"data_offsets":)" + offsets), eight),
        "not a list of two non-negative integers");
  expectBad(rawFile(entry(f32 + R"("shape":[2])"), eight),
            "not a list of two non-negative integers");
  expectBad(rawFile(entry(f32 + R"("shape":[0],"data_offsets":[8,4])"), eight),
            "decrease");
  expectBad(rawFile(entry(f32 + R"("shape":[4],"data_offsets":[0,16])"), eight),
            "beyond the data");
  expectBad(rawFile(entry(f32 + R"("shape":[3],"data_offsets":[0,8])"), eight),
            "span 8 bytes but shape [3] of F32 needs 12");
  expectBad(rawFile(entry(R"("dtype":"BF16","shape":[2],"data_offsets":[0,8])"),
                    eight),
            "needs 4");
  // Shapes whose byte count would overflow must not allocate or wrap.
  expectBad(rawFile(entry(f32 + R"("shape":[4294967296,4294967296,4294967296],)"
                                R"("data_offsets":[0,8])"),
                    eight),
            "too many elements");
  expectBad(rawFile(entry(f32 + R"("shape":[1073741824,1073741824],)"
                                R"("data_offsets":[0,8])"),
                    eight),
            "span 8 bytes");
  expectBad(rawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                    std::string(12, '\0')),
            "'a' and 'b' overlap");
  expectBad(rawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                    R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                    eight),
            "names 'a' twice");
  expectBad(rawFile(R"({"__metadata__":{"k":1}})", ""),
            "metadata value of 'k' is not a string");
  expectBad(rawFile(R"({"__metadata__":["k"]})", ""),
            "__metadata__ is not an object");

  // A real file cut short.
  ASSERT_EQ(saveCheckpoint(path("ok"), sampleCheckpoint(1)).message(), "");
  std::string whole = readBytes(path("ok/model.safetensors"));
  expectBad(whole.substr(0, whole.size() - 4), "truncated");
}

TEST_F(CheckpointTest, BadTensorsAreNotWritten) {
  std::string file = path("t.safetensors");
  auto expectRefused = [&](std::vector<FloatTensor> tensors,
                           std::map<std::string, std::string> metadata,
                           const std::string &phrase) {
    auto error = writeSafetensors(file, tensors, metadata);
    ASSERT_TRUE(error) << phrase;
    EXPECT_NE(error.message().find(phrase), std::string::npos)
        << error.message();
    EXPECT_FALSE(fs::exists(file));
    EXPECT_EQ(tempFiles(root), 0);
  };
  expectRefused({{"a", {2}, {1}}}, {}, "has 1 values but shape [2] needs 2");
  expectRefused({{"a", {-1}, {}}}, {}, "negative dimension");
  expectRefused({{"a", {1}, {1}}, {"a", {1}, {2}}}, {}, "appears twice");
  expectRefused({{"__metadata__", {1}, {1}}}, {}, "reserved name");
  expectRefused({{"a\xff", {1}, {1}}}, {}, "not valid UTF-8");
  expectRefused({}, {{"k", "\xc3"}}, "not valid UTF-8");

  auto error = writeSafetensors(path("no/such/dir/t.safetensors"),
                                {{"a", {1}, {1}}}, {});
  ASSERT_TRUE(error);
  EXPECT_NE(error.message().find("No such file or directory"),
            std::string::npos)
      << error.message();

  Checkpoint c = sampleCheckpoint(1);
  c.metadata["kiln_step"] = "9";
  error = saveCheckpoint(path("c"), c);
  ASSERT_TRUE(error);
  EXPECT_NE(error.message().find("'kiln_step' is reserved"), std::string::npos);
}

TEST_F(CheckpointTest, WriteFileAtomically) {
  std::string file = path("config.toml");
  ASSERT_EQ(writeFileAtomically(file, "a = 1\n").message(), "");
  ASSERT_EQ(writeFileAtomically(file, "b = 2\n").message(), "");
  EXPECT_EQ(readBytes(file), "b = 2\n");
  EXPECT_EQ(tempFiles(root), 0);
  // A directory in the way is never replaced, and no temp file is left.
  fs::create_directory(path("d"));
  fs::create_directory(path("d/x"));
  auto error = writeFileAtomically(path("d/x"), "c");
  ASSERT_TRUE(error);
  EXPECT_NE(
      error.message().find("is a directory, not a regular file; Kiln replaces "
                           "only regular files"),
      std::string::npos)
      << error.message();
  EXPECT_EQ(tempFiles(path("d")), 0);
  // Nor a symbolic link (even to a regular file), nor a device node.
  fs::create_symlink(file, path("link"));
  error = writeFileAtomically(path("link"), "c");
  ASSERT_TRUE(error);
  EXPECT_NE(error.message().find("is a symbolic link"), std::string::npos)
      << error.message();
  EXPECT_EQ(readBytes(file), "b = 2\n");
  error = writeFileAtomically("/dev/null", "c");
  ASSERT_TRUE(error);
  EXPECT_NE(error.message().find("is a character device"), std::string::npos)
      << error.message();
}

//===----------------------------------------------------------------------===//
// Failed saves leave the previous checkpoint as it was
//===----------------------------------------------------------------------===//

namespace {
struct Snapshot {
  std::string model, optimizer;
  bool operator==(const Snapshot &o) const {
    return model == o.model && optimizer == o.optimizer;
  }
};
Snapshot snapshot(const std::string &dir) {
  return {readBytes(dir + "/model.safetensors"),
          readBytes(dir + "/optimizer.safetensors")};
}
} // namespace

TEST_F(CheckpointTest, FailedSaveOfBadTensorsKeepsPrevious) {
  std::string dir = path("ckpt");
  ASSERT_EQ(saveCheckpoint(dir, sampleCheckpoint(1)).message(), "");
  Snapshot before = snapshot(dir);
  // The optimizer part is bad: the model part must not be written either.
  Checkpoint c = sampleCheckpoint(2);
  c.optimizer[0].data.pop_back();
  auto error = saveCheckpoint(dir, c);
  ASSERT_TRUE(error);
  EXPECT_NE(error.message().find("optimizer.safetensors"), std::string::npos)
      << error.message();
  EXPECT_TRUE(snapshot(dir) == before);
  EXPECT_EQ(tempFiles(dir), 0);
}

TEST_F(CheckpointTest, FailedSaveWhenDiskIsFullKeepsPrevious) {
  std::string dir = path("ckpt");
  ASSERT_EQ(saveCheckpoint(dir, sampleCheckpoint(1)).message(), "");
  Snapshot before = snapshot(dir);
  // A file size limit makes writes fail as on a full disk (EFBIG instead of
  // ENOSPC), for root too. The model file is written first: make each file
  // in turn too big (~480 KB against a 64 KB limit).
  Checkpoint bigModel = sampleCheckpoint(2, 10000);
  Checkpoint bigOptimizer = sampleCheckpoint(2);
  bigOptimizer.optimizer = bigModel.model;
  for (const Checkpoint *c : {&bigModel, &bigOptimizer}) {
    rlimit old;
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
    auto oldHandler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = old;
    small.rlim_cur = 64 << 10;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
    auto error = saveCheckpoint(dir, *c);
    setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, oldHandler);
    ASSERT_TRUE(error);
    EXPECT_NE(error.message().find("File too large"), std::string::npos)
        << error.message();
    EXPECT_NE(error.message().find(c == &bigModel ? "model.safetensors"
                                                  : "optimizer.safetensors"),
              std::string::npos)
        << error.message();
    EXPECT_TRUE(snapshot(dir) == before) << error.message();
    EXPECT_EQ(tempFiles(dir), 0);
  }
}

TEST_F(CheckpointTest, FailedSaveWhenDirIsAFile) {
  std::string file = path("not-a-dir");
  writeBytes(file, "keep me");
  auto error = saveCheckpoint(file, sampleCheckpoint(1));
  ASSERT_TRUE(error);
  EXPECT_NE(error.message().find("cannot create checkpoint directory"),
            std::string::npos)
      << error.message();
  EXPECT_EQ(readBytes(file), "keep me");
  error = saveCheckpoint(file + "/sub", sampleCheckpoint(1));
  ASSERT_TRUE(error);
  EXPECT_EQ(readBytes(file), "keep me");
}

TEST_F(CheckpointTest, FailedSaveInReadOnlyDirKeepsPrevious) {
  if (geteuid() == 0)
    GTEST_SKIP() << "root ignores directory permissions";
  std::string dir = path("ckpt");
  ASSERT_EQ(saveCheckpoint(dir, sampleCheckpoint(1)).message(), "");
  Snapshot before = snapshot(dir);
  ASSERT_EQ(::chmod(dir.c_str(), 0555), 0);
  auto error = saveCheckpoint(dir, sampleCheckpoint(2));
  ::chmod(dir.c_str(), 0755);
  ASSERT_TRUE(error);
  EXPECT_NE(error.message().find("Permission denied"), std::string::npos)
      << error.message();
  EXPECT_TRUE(snapshot(dir) == before);
}

//===----------------------------------------------------------------------===//
// What loading checks
//===----------------------------------------------------------------------===//

TEST_F(CheckpointTest, StepMismatchIsDetected) {
  Checkpoint c = sampleCheckpoint(1);
  ASSERT_EQ(saveCheckpoint(path("a"), c).message(), "");
  ASSERT_EQ(saveCheckpoint(path("b"), sampleCheckpoint(2)).message(), "");
  // As if a save had replaced only the optimizer file.
  fs::copy_file(path("b/optimizer.safetensors"),
                path("a/optimizer.safetensors"),
                fs::copy_options::overwrite_existing);
  std::string error =
      loadCheckpoint(path("a"), shapesOf(c.model), shapesOf(c.optimizer))
          .error()
          .message();
  EXPECT_NE(error.find("inconsistent"), std::string::npos) << error;
  EXPECT_NE(error.find("model.safetensors is at step 1"), std::string::npos)
      << error;
  EXPECT_NE(error.find("optimizer.safetensors at step 2"), std::string::npos)
      << error;
}

TEST_F(CheckpointTest, StepMustBeThere) {
  std::string dir = path("c");
  fs::create_directory(dir);
  ASSERT_EQ(writeSafetensors(dir + "/model.safetensors", {}, {}).message(), "");
  ASSERT_EQ(writeSafetensors(dir + "/optimizer.safetensors", {},
                             {{"kiln_step", "x1"}})
                .message(),
            "");
  std::string error = loadCheckpoint(dir, {}, {}).error().message();
  EXPECT_NE(error.find("model.safetensors: no kiln_step"), std::string::npos)
      << error;
  ASSERT_EQ(
      writeSafetensors(dir + "/model.safetensors", {}, {{"kiln_step", "3"}})
          .message(),
      "");
  error = loadCheckpoint(dir, {}, {}).error().message();
  EXPECT_NE(error.find("kiln_step 'x1' is not a non-negative integer"),
            std::string::npos)
      << error;
  error = loadCheckpoint(path("nowhere"), {}, {}).error().message();
  EXPECT_NE(error.find("cannot open"), std::string::npos) << error;
}

TEST_F(CheckpointTest, TensorSetIsChecked) {
  Checkpoint c = sampleCheckpoint(5);
  ASSERT_EQ(saveCheckpoint(root, c).message(), "");
  TensorShapes model = shapesOf(c.model), optimizer = shapesOf(c.optimizer);
  std::string error;

  TensorShapes wrongShape = model;
  wrongShape["model.embed_tokens.weight"] = {4, 3};
  error = loadCheckpoint(root, wrongShape, optimizer).error().message();
  EXPECT_NE(error.find("model.safetensors: tensor 'model.embed_tokens.weight' "
                       "has shape [3, 4], expected [4, 3]"),
            std::string::npos)
      << error;

  TensorShapes moreExpected = optimizer;
  moreExpected["exp_avg.model.embed_tokens.weight"] = {3, 4};
  error = loadCheckpoint(root, model, moreExpected).error().message();
  EXPECT_NE(error.find("optimizer.safetensors: tensor "
                       "'exp_avg.model.embed_tokens.weight' is missing"),
            std::string::npos)
      << error;

  TensorShapes fewerExpected = model;
  fewerExpected.erase("model.scalar");
  error = loadCheckpoint(root, fewerExpected, optimizer).error().message();
  EXPECT_NE(error.find("unexpected tensor 'model.scalar'"), std::string::npos)
      << error;

  // Model tensors expected in the optimizer file are missing there.
  error = loadCheckpoint(root, optimizer, model).error().message();
  EXPECT_NE(error.find("is missing"), std::string::npos) << error;
}
