// Data: text and token files, each bad-input case, and batches that are
// deterministic windows with targets shifted by one.
#include "kiln/Runtime/Train/Data.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

using namespace kiln::runtime;

namespace {
std::string writeTemp(const std::string &name, const std::string &bytes) {
  std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string tokenFile(int32_t version, int32_t count,
                      const std::vector<uint32_t> &tokens) {
  std::string bytes(256 * 4, '\0');
  int32_t header[3] = {20240520, version, count};
  std::memcpy(bytes.data(), header, sizeof header);
  size_t width = version == 1 ? 2 : 4;
  for (uint32_t t : tokens)
    bytes.append(reinterpret_cast<const char *>(&t), width);
  return bytes;
}
} // namespace

TEST(Data, TextIsBytes) {
  auto tokens = loadTokens(writeTemp("t.txt", "ab\xff"), 256);
  ASSERT_TRUE(tokens) << tokens.error();
  EXPECT_EQ(*tokens, (std::vector<uint32_t>{'a', 'b', 0xff}));
}

TEST(Data, TokenFiles) {
  auto t16 =
      loadTokens(writeTemp("a.bin", tokenFile(1, 3, {1, 65535, 7})), 65536);
  ASSERT_TRUE(t16) << t16.error();
  EXPECT_EQ(*t16, (std::vector<uint32_t>{1, 65535, 7}));
  auto t32 =
      loadTokens(writeTemp("b.bin", tokenFile(2, 2, {100000, 5})), 128256);
  ASSERT_TRUE(t32) << t32.error();
  EXPECT_EQ(*t32, (std::vector<uint32_t>{100000, 5}));
}

TEST(Data, BadInputs) {
  std::string error =
      loadTokens("/nonexistent/data.txt", 256).error().message();
  EXPECT_EQ(error, "cannot open data file '/nonexistent/data.txt': No such "
                   "file or directory");
  // Not a regular file: refused before anything is read (a FIFO would
  // block, /dev/zero never end).
  error = loadTokens("/dev/zero", 256).error().message();
  EXPECT_EQ(error, "data file '/dev/zero' is not a regular file (it is a "
                   "character device)");

  std::string empty = writeTemp("empty.txt", "");
  error = loadTokens(empty, 256).error().message();
  EXPECT_EQ(error, "data file '" + empty + "' is empty");

  std::string big = writeTemp("big.bin", tokenFile(1, 2, {3, 300}));
  error = loadTokens(big, 256).error().message();
  EXPECT_EQ(error, big + ": token 300 at position 1 is not below the vocab "
                         "size 256");

  std::string cut = writeTemp("cut.bin", tokenFile(2, 10, {1, 2}));
  error = loadTokens(cut, 256).error().message();
  EXPECT_EQ(error, cut + ": token file is truncated (header says 10 tokens)");

  std::string v3 = writeTemp("v3.bin", tokenFile(3, 1, {1}));
  error = loadTokens(v3, 256).error().message();
  EXPECT_EQ(error, v3 + ": token file version 3 is neither 1 (uint16) nor 2 "
                        "(uint32)");
}

TEST(Data, SplitNeedsASequenceOnEachSide) {
  std::string error = splitTokens(100, 16).error().message();
  EXPECT_EQ(error, "the data has 100 tokens: too few for a training and a "
                   "validation sequence of 16 tokens (needs 170)");
  auto split = splitTokens(1000, 16);
  ASSERT_TRUE(split) << split.error();
  EXPECT_EQ(split->trainEnd, 900u);
  EXPECT_EQ(split->validBegin, 900u);
  EXPECT_EQ(split->validEnd, 1000u);
}

TEST(Data, BatchesAreDeterministicShiftedWindows) {
  std::vector<uint32_t> tokens(500);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = i % 251;
  int32_t in1[2 * 8], tg1[2 * 8], in2[2 * 8], tg2[2 * 8];
  fillBatch(tokens, 100, 300, 2, 8, 42, 5, in1, tg1);
  fillBatch(tokens, 100, 300, 2, 8, 42, 5, in2, tg2);
  EXPECT_EQ(0, std::memcmp(in1, in2, sizeof in1));
  for (int b = 0; b < 2; ++b)
    for (int s = 0; s < 8; ++s) {
      int32_t x = in1[b * 8 + s];
      EXPECT_EQ(tg1[b * 8 + s], static_cast<int32_t>((x + 1) % 251));
    }
  fillBatch(tokens, 100, 300, 2, 8, 42, 6, in2, tg2);
  EXPECT_NE(0, std::memcmp(in1, in2, sizeof in1));
}

TEST(Data, DefaultDataIsTheFortunes) {
  auto tokens = loadTokens(kDefaultData, 256);
  ASSERT_TRUE(tokens) << tokens.error();
  EXPECT_GT(tokens->size(), 1000000u);
}

TEST(Data, RowsOfABatchAreThoseOfTheWholeBatch) {
  // A rank's share (rows [firstRow, firstRow + rows)) is exactly those rows
  // of the batch drawn whole.
  std::vector<uint32_t> tokens(400);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<uint32_t>(i % 251);
  int32_t all[6 * 8], allTg[6 * 8], part[2 * 8], partTg[2 * 8];
  fillBatch(tokens, 10, 390, 6, 8, 3, 9, all, allTg);
  fillBatch(tokens, 10, 390, 6, 8, 3, 9, part, partTg, 2, 2);
  for (int i = 0; i < 2 * 8; ++i) {
    EXPECT_EQ(part[i], all[2 * 8 + i]);
    EXPECT_EQ(partTg[i], allTg[2 * 8 + i]);
  }
}

namespace {
/// A fresh folder under the test's temporary folder.
std::string tempFolder(const std::string &name) {
  std::string dir = ::testing::TempDir() + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::vector<uint32_t> range(uint32_t from, uint32_t count) {
  std::vector<uint32_t> out(count);
  for (uint32_t i = 0; i < count; ++i)
    out[i] = from + i;
  return out;
}
} // namespace

TEST(Data, ShardFolderSplitsTrainingFromValidation) {
  // Shards in name order; val shards are the validation part, wherever
  // they sort.
  std::string dir = tempFolder("shards");
  std::ofstream(dir + "/train_000001.bin") << tokenFile(1, 20, range(100, 20));
  std::ofstream(dir + "/train_000000.bin") << tokenFile(2, 30, range(0, 30));
  std::ofstream(dir + "/val_000000.bin") << tokenFile(1, 10, range(500, 10));
  std::ofstream(dir + "/notes.txt") << "not a shard";
  auto data = loadDataset(dir, 1000, 8);
  ASSERT_TRUE(data) << data.error();
  EXPECT_EQ(data->trainShards, 2u);
  EXPECT_EQ(data->validShards, 1u);
  ASSERT_EQ(data->tokens.size(), 60u);
  EXPECT_EQ(data->tokens[0], 0u);
  EXPECT_EQ(data->tokens[30], 100u);
  EXPECT_EQ(data->tokens[50], 500u);
  EXPECT_EQ(data->split.trainEnd, 50u);
  EXPECT_EQ(data->split.validBegin, 50u);
  EXPECT_EQ(data->split.validEnd, 60u);

  // A glob of the training shards alone: split 90/10 like one file.
  auto globbed = loadDataset(dir + "/train_*.bin", 1000, 4);
  ASSERT_TRUE(globbed) << globbed.error();
  EXPECT_EQ(globbed->tokens.size(), 50u);
  EXPECT_EQ(globbed->split.trainEnd, 45u);
  EXPECT_EQ(globbed->validShards, 0u);
}

TEST(Data, BadShardsAreOneLine) {
  std::string dir = tempFolder("bad-shards");
  EXPECT_EQ(loadDataset(dir, 1000, 8).error().message(),
            "the data folder '" + dir + "' holds no token shards (*.bin)");
  EXPECT_EQ(loadDataset(dir + "/x_*.bin", 1000, 8).error().message(),
            "no token shards match '" + dir + "/x_*.bin'");
  std::ofstream(dir + "/val_0.bin") << tokenFile(1, 10, range(0, 10));
  EXPECT_NE(loadDataset(dir, 1000, 8)
                .error()
                .message()
                .find("has validation shards only (1)"),
            std::string::npos);
  std::ofstream(dir + "/train_0.bin") << tokenFile(1, 20, range(0, 20));
  // Validation holds 10 tokens: too few for 16 and a target.
  EXPECT_EQ(loadDataset(dir, 1000, 16).error().message(),
            "the validation shards of '" + dir +
                "' hold 10 tokens, fewer than one sequence of 16 and its "
                "target");
  std::ofstream(dir + "/train_1.bin") << "plain text";
  EXPECT_EQ(loadDataset(dir, 1000, 4).error().message(),
            dir + "/train_1.bin: not a token shard (no llm.c header: magic "
                  "20240520)");
  std::ofstream(dir + "/train_1.bin") << tokenFile(1, 2, {1, 999});
  EXPECT_EQ(loadDataset(dir, 999, 4).error().message(),
            dir + "/train_1.bin: token 999 at position 1 is not below the "
                  "vocab size 999");
}

TEST(Data, MutatedShardsAreRefusedOrRead) {
  // A small fuzzer (the sanitizer job runs it under ASan and UBSan): 2000
  // shards with bytes flipped, cut short or grown; each loads or gives one
  // error line, never a crash, and every token loaded is below the vocab.
  std::string dir = tempFolder("fuzz-shards");
  std::string good = tokenFile(1, 64, range(0, 64));
  std::ofstream(dir + "/val_0.bin") << tokenFile(1, 40, range(100, 40));
  uint64_t state = 0x9e3779b97f4a7c15u;
  auto next = [&]() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  int refused = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string bytes = good;
    switch (next() % 3) {
    case 0: // flip up to 4 bytes, the header's often
      for (uint64_t k = 0, n = 1 + next() % 4; k < n; ++k) {
        size_t at = next() % 2 ? next() % 12 : next() % bytes.size();
        bytes[at] = static_cast<char>(next());
      }
      break;
    case 1:
      bytes.resize(next() % bytes.size());
      break;
    default:
      bytes.append(next() % 64, static_cast<char>(next()));
    }
    std::ofstream(dir + "/train_0.bin", std::ios::trunc) << bytes;
    auto data = loadDataset(dir, 200, 8);
    if (!data) {
      ++refused;
      EXPECT_EQ(data.error().message().find('\n'), std::string::npos);
      continue;
    }
    for (uint32_t t : data->tokens)
      ASSERT_LT(t, 200u);
    EXPECT_LE(data->split.trainEnd, data->split.validBegin);
    EXPECT_EQ(data->split.validEnd, data->tokens.size());
  }
  EXPECT_GT(refused, 500);
  EXPECT_LT(refused, 2000);
}
