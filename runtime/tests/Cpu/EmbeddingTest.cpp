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
                         TableSlice::whole(vocab), dim));
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
                                 TableSlice::whole(vocab), dim));
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
                        TableSlice::whole(vocab), dim);
    EXPECT_TRUE(s);
    EXPECT_NE(s.message().find(std::to_string(bad)), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("position 2"), std::string::npos) << s.message();
    for (float v : out)
      EXPECT_EQ(v, 9.0f);
    std::vector<float> dtable(vocab * dim, 0.0f);
    std::vector<float> dout(tokens.size() * dim, 1.0f);
    EXPECT_TRUE(embeddingBackward(dout.data(), tokens.data(), dtable.data(),
                                  tokens.size(), TableSlice::whole(vocab),
                                  dim));
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
                                   TableSlice::whole(vocab), dim));
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

// A vocabulary of 30 over 4 slices of 8 rows (the last one 2 rows of
// padding), as kiln-tp-partition cuts it: the slices' lookups sum to the
// whole table's rows exactly (one non-zero term each), their gradients are
// the whole gradient's rows bit for bit, and an id of the vocabulary
// outside a slice is no error, but one outside the vocabulary is.
TEST(Embedding, SlicesSumToTheWholeTable) {
  const int64_t vocab = 30, dim = 6, n = 64, tp = 4, rows = 8;
  std::vector<float> table = randomFloats(vocab * dim, 8);
  std::vector<int32_t> tokens = randomTokens(n, vocab, 9);
  tokens[0] = 0;
  tokens[1] = vocab - 1;
  std::vector<float> dout = randomFloats(n * dim, 10);
  std::vector<float> whole(n * dim), wholeGrad(vocab * dim, 0.0f);
  ASSERT_FALSE(embedding(table.data(), tokens.data(), whole.data(), n,
                         TableSlice::whole(vocab), dim));
  ASSERT_FALSE(embeddingBackward(dout.data(), tokens.data(), wholeGrad.data(),
                                 n, TableSlice::whole(vocab), dim));
  std::vector<float> sum(n * dim, 0.0f);
  for (int64_t r = 0; r < tp; ++r) {
    TableSlice slice{rows, r * rows, vocab};
    std::vector<float> part(rows * dim, 0.0f), grad(rows * dim, 0.0f);
    for (int64_t i = 0; i < rows * dim && r * rows * dim + i < vocab * dim; ++i)
      part[i] = table[r * rows * dim + i];
    std::vector<float> out(n * dim, 7.0f);
    ASSERT_FALSE(
        embedding(part.data(), tokens.data(), out.data(), n, slice, dim));
    for (int64_t i = 0; i < n * dim; ++i)
      sum[i] += out[i];
    ASSERT_FALSE(embeddingBackward(dout.data(), tokens.data(), grad.data(), n,
                                   slice, dim));
    for (int64_t i = 0; i < rows * dim; ++i) {
      int64_t at = r * rows * dim + i;
      if (at < vocab * dim)
        EXPECT_EQ(grad[i], wholeGrad[at]) << "slice " << r << " element " << i;
      else
        EXPECT_EQ(grad[i], 0.0f) << "padding of slice " << r;
    }
  }
  EXPECT_TRUE(sameBits(sum, whole));
  std::vector<int32_t> bad = {3, int32_t(vocab)};
  std::vector<float> out(2 * dim);
  EXPECT_TRUE(embedding(table.data(), bad.data(), out.data(), 2,
                        TableSlice{rows, 3 * rows, vocab}, dim));
}
