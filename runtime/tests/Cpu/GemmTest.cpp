// The portable GEMM (lib/Cpu/Gemm.h) on odd shapes, every transpose pair and
// leading dimensions wider than the rows: each element within the f32 sum's
// bound of float64, and against OpenBLAS's cblas_sgemm where the build has
// it; accumulation; the same bits for every thread count and for the
// baseline and AVX2 copies; gemm() is the library configuring named.
#include "TestUtil.h"

#include "../../lib/Cpu/Gemm.h"
#include "../../lib/Cpu/Simd.h"

#include <gtest/gtest.h>

#if KILN_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

using namespace kiln::runtime::cpu;
using namespace kiln::runtime::cpu::test;
using kiln::runtime::cpu::detail::GemmOperand;

namespace {

struct Shape {
  int64_t m, n, k;
};

/// Shapes across the blocking: single elements, edges of the register
/// tiles (4 and 6 rows, 8 and 16 columns), several inner slices (256),
/// row blocks (96) and column blocks (1024).
const Shape kShapes[] = {{1, 1, 1},     {1, 17, 5},    {7, 5, 3},
                         {13, 9, 300},  {37, 23, 70},  {97, 31, 513},
                         {5, 1037, 19}, {131, 7, 261}, {100, 1030, 257}};

/// A row-major operand of `rows` x `cols` as op(X), stored transposed when
/// asked, with a leading dimension 3 wider than needed (padding NaN, which
/// must never be read).
struct Operand {
  std::vector<float> data;
  int64_t ld;
  bool transposed;
  int64_t rows, cols;

  Operand(int64_t rows, int64_t cols, bool transposed, uint32_t seed)
      : transposed(transposed), rows(rows), cols(cols) {
    int64_t stored = transposed ? cols : rows, width = transposed ? rows : cols;
    ld = width + 3;
    data.assign(stored * ld, std::numeric_limits<float>::quiet_NaN());
    std::vector<float> values = randomFloats(rows * cols, seed);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        at(r, c) = values[r * cols + c];
  }
  float &at(int64_t r, int64_t c) {
    return transposed ? data[c * ld + r] : data[r * ld + c];
  }
  float get(int64_t r, int64_t c) const {
    return transposed ? data[c * ld + r] : data[r * ld + c];
  }
  GemmOperand view() const { return {data.data(), ld, transposed}; }
};

/// C [m, n] with row stride n + 2 (padding 7.0, which must stay).
std::vector<float> outputOf(int64_t m, int64_t n, uint32_t seed) {
  std::vector<float> c((m - 1) * (n + 2) + n, 7.0f);
  std::vector<float> values = randomFloats(m * n, seed);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      c[i * (n + 2) + j] = values[i * n + j];
  return c;
}

/// Every element of C within the f32 bound of the float64 product (plus
/// the original C when accumulating): (k + 2) 2^-24 times the sum of the
/// terms' magnitudes. Padding untouched.
void expectWithinBound(const std::vector<float> &c,
                       const std::vector<float> &before, const Operand &a,
                       const Operand &b, int64_t m, int64_t n, int64_t k,
                       bool accumulate, const std::string &what) {
  const int64_t ldc = n + 2;
  int64_t bad = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double exact = accumulate ? before[i * ldc + j] : 0.0;
      double magnitude = std::fabs(exact);
      for (int64_t p = 0; p < k; ++p) {
        double t = double(a.get(i, p)) * b.get(p, j);
        exact += t;
        magnitude += std::fabs(t);
      }
      double bound = (k + 2) * 0x1p-24 * magnitude;
      if (!(std::fabs(c[i * ldc + j] - exact) <= bound) && bad++ < 5)
        ADD_FAILURE() << what << ": C(" << i << ", " << j
                      << ") = " << c[i * ldc + j] << ", float64 " << exact;
    }
  for (int64_t i = 0; i + 1 < m; ++i)
    for (int64_t j = n; j < ldc; ++j)
      EXPECT_EQ(c[i * ldc + j], 7.0f) << what << ": padding written";
}

std::string name(const Shape &s, bool ta, bool tb, bool accumulate) {
  return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
         std::to_string(s.k) + (ta ? " A^T" : " A") + (tb ? " B^T" : " B") +
         (accumulate ? " +=" : " =");
}

/// Runs portableGemm on one case with `threads` threads.
std::vector<float> portable(const Operand &a, const Operand &b,
                            std::vector<float> c, int64_t m, int64_t n,
                            int64_t k, bool accumulate, int threads) {
  ThreadsScope scope(threads);
  detail::portableGemm(a.view(), b.view(), c.data(), n + 2, m, n, k,
                       accumulate);
  return c;
}

} // namespace

TEST(Gemm, PortableMatchesFloat64OnOddShapes) {
  uint32_t seed = 1;
  for (const Shape &s : kShapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool accumulate : {false, true}) {
          Operand a(s.m, s.k, ta, seed++), b(s.k, s.n, tb, seed++);
          std::vector<float> before = outputOf(s.m, s.n, seed++);
          if (!accumulate) // never read
            for (float &v : before)
              if (v != 7.0f)
                v = std::numeric_limits<float>::quiet_NaN();
          std::vector<float> c =
              portable(a, b, before, s.m, s.n, s.k, accumulate, 1);
          expectWithinBound(c, before, a, b, s.m, s.n, s.k, accumulate,
                            name(s, ta, tb, accumulate));
        }
}

#if KILN_HAVE_OPENBLAS
TEST(Gemm, PortableMatchesOpenBlas) {
  uint32_t seed = 100;
  for (const Shape &s : kShapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool accumulate : {false, true}) {
          Operand a(s.m, s.k, ta, seed++), b(s.k, s.n, tb, seed++);
          std::vector<float> before = outputOf(s.m, s.n, seed++);
          std::vector<float> mine =
              portable(a, b, before, s.m, s.n, s.k, accumulate, 2);
          std::vector<float> blas = before;
          cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                      tb ? CblasTrans : CblasNoTrans, int(s.m), int(s.n),
                      int(s.k), 1.0f, a.data.data(), int(a.ld), b.data.data(),
                      int(b.ld), accumulate ? 1.0f : 0.0f, blas.data(),
                      int(s.n + 2));
          std::vector<double> reference(blas.begin(), blas.end());
          EXPECT_LE(relErr(mine, reference), 1e-6)
              << name(s, ta, tb, accumulate);
        }
}
#endif

TEST(Gemm, SameBitsForEveryThreadCountAndBothCopies) {
  // Tall and wide, so that threads split rows in one and columns in the
  // other.
  for (Shape s : {Shape{517, 67, 300}, Shape{19, 1100, 260}})
    for (bool ta : {false, true}) {
      Operand a(s.m, s.k, ta, 7), b(s.k, s.n, !ta, 8);
      std::vector<float> before = outputOf(s.m, s.n, 9);
      std::vector<float> one = portable(a, b, before, s.m, s.n, s.k, true, 1);
      for (int threads : {2, 3, 5})
        EXPECT_TRUE(
            sameBits(one, portable(a, b, before, s.m, s.n, s.k, true, threads)))
            << name(s, ta, !ta, true) << ", " << threads << " threads";
      detail::allowAvx2 = false;
      std::vector<float> baseline =
          portable(a, b, before, s.m, s.n, s.k, true, 2);
      detail::allowAvx2 = true;
      EXPECT_TRUE(sameBits(one, baseline))
          << name(s, ta, !ta, true) << ": baseline copy against "
          << (detail::useAvx2() ? "AVX2" : "baseline");
    }
}

TEST(Gemm, GemmIsTheConfiguredLibrary) {
#if KILN_HAVE_OPENBLAS
  EXPECT_STREQ(detail::gemmLibrary(), "OpenBLAS");
#else
  EXPECT_STREQ(detail::gemmLibrary(), "portable");
  // Without OpenBLAS gemm() is the portable loops, bit for bit.
  Operand a(45, 33, false, 21), b(33, 29, true, 22);
  std::vector<float> before = outputOf(45, 29, 23);
  std::vector<float> viaGemm = before;
  detail::gemm(a.view(), b.view(), viaGemm.data(), 31, 45, 29, 33, true);
  EXPECT_TRUE(sameBits(viaGemm, portable(a, b, before, 45, 29, 33, true, 1)));
#endif
}

TEST(Gemm, PortableCanBeChosen) {
  // setCpuGemm("portable") makes gemm() the portable loops, bit for bit;
  // the default comes back with the build's first library.
  const std::vector<std::string> &names = cpuGemmLibraries();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.back(), "portable");
  Operand a(45, 33, false, 31), b(33, 29, true, 32);
  std::vector<float> before = outputOf(45, 29, 33);
  std::vector<float> viaGemm = before;
  ASSERT_FALSE(setCpuGemm("portable"));
  EXPECT_STREQ(detail::gemmLibrary(), "portable");
  detail::gemm(a.view(), b.view(), viaGemm.data(), 31, 45, 29, 33, true);
  EXPECT_TRUE(sameBits(viaGemm, portable(a, b, before, 45, 29, 33, true, 1)));
  ASSERT_FALSE(setCpuGemm(names.front()));
  kiln::runtime::Error error = setCpuGemm("mkl");
  ASSERT_TRUE(error);
  EXPECT_NE(error.message().find("unknown CPU GEMM library 'mkl'"),
            std::string::npos)
      << error.message();
}
