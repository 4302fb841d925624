// embedding: the lookup copies rows; the gradient adds into dtable in token
// order (checked against a float64 sum and against the order the header
// promises), bad tokens fail and write nothing, thread counts don't matter.
#include "kiln/Runtime/Cpu/Embedding.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

using kiln::runtime::Error;
using namespace kiln::runtime::cpu;
using namespace kiln::runtime::cpu::test;

namespace {

std::vector<int32_t> randomTokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::vector<float> u = randomFloats(n, seed, 0.0f, 1.0f);
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i)
    t[i] = std::min<int32_t>(int32_t(u[i] * vocab), int32_t(vocab - 1));
  return t;
}

} // namespace

TEST(Embedding, LookupCopiesRows) {
  const int64_t vocab = 17, dim = 12;
  std::vector<float> table = randomFloats(vocab * dim, 1);
  std::vector<int32_t> tokens = {0, 16, 3, 3, 9};
  std::vector<float> out(tokens.size() * dim);
  ASSERT_FALSE(embedding(table.data(), tokens.data(), out.data(), tokens.size(),
                         vocab, dim));
  for (size_t t = 0; t < tokens.size(); ++t)
    for (int64_t i = 0; i < dim; ++i)
      EXPECT_EQ(out[t * dim + i], table[tokens[t] * dim + i]);
}

TEST(Embedding, BackwardAccumulatesInTokenOrder) {
  const int64_t vocab = 7, dim = 5, n = 40; // many repeats per row
  std::vector<int32_t> tokens = randomTokens(n, vocab, 2);
  std::vector<float> dout = randomFloats(n * dim, 3);
  std::vector<float> initial = randomFloats(vocab * dim, 4);
  std::vector<float> dtable = initial;
  ASSERT_FALSE(embeddingBackward(dout.data(), tokens.data(), dtable.data(), n,
                                 vocab, dim));
  std::vector<double> sum = widen(initial);
  std::vector<float> ordered = initial; // fp32, t = 0, 1, ...
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < dim; ++i) {
      sum[tokens[t] * dim + i] += dout[t * dim + i];
      ordered[tokens[t] * dim + i] += dout[t * dim + i];
    }
  EXPECT_LE(relErr(dtable, sum), 1e-6);
  EXPECT_TRUE(sameBits(dtable, ordered));
}

TEST(Embedding, BadTokensFailAndWriteNothing) {
  const int64_t vocab = 8, dim = 3;
  std::vector<float> table = randomFloats(vocab * dim, 5);
  for (int32_t bad : {-1, 8, -2147483647 - 1}) {
    std::vector<int32_t> tokens = {1, 2, bad, 3};
    std::vector<float> out(tokens.size() * dim, 9.0f);
    Error s = embedding(table.data(), tokens.data(), out.data(), tokens.size(),
                        vocab, dim);
    EXPECT_TRUE(s);
    EXPECT_NE(s.message().find(std::to_string(bad)), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("position 2"), std::string::npos) << s.message();
    for (float v : out)
      EXPECT_EQ(v, 9.0f);
    std::vector<float> dtable(vocab * dim, 0.0f);
    std::vector<float> dout(tokens.size() * dim, 1.0f);
    EXPECT_TRUE(embeddingBackward(dout.data(), tokens.data(), dtable.data(),
                                  tokens.size(), vocab, dim));
    for (float v : dtable)
      EXPECT_EQ(v, 0.0f);
  }
}

TEST(Embedding, BackwardIsDeterministicAcrossRunsAndThreadCounts) {
  const int64_t vocab = 50, dim = 256, n = 1024;
  std::vector<int32_t> tokens = randomTokens(n, vocab, 6);
  std::vector<float> dout = randomFloats(n * dim, 7);
  auto run = [&] {
    std::vector<float> dtable(vocab * dim, 0.0f);
    EXPECT_FALSE(embeddingBackward(dout.data(), tokens.data(), dtable.data(), n,
                                   vocab, dim));
    return dtable;
  };
  std::vector<float> first = run(), second = run(), threaded;
  {
    ThreadsScope threads(2);
    threaded = run();
  }
  EXPECT_TRUE(sameBits(first, second));
  EXPECT_TRUE(sameBits(first, threaded));
}
