// The fused-group interpreter against references computed here, one
// element at a time in double (or with the plan's rounding rules spelled
// out), and against the kernels of kiln/Runtime/Cpu for the ops the
// compiler lowers to groups.
#include "kiln/Runtime/Cpu/Bf16.h"
#include "kiln/Runtime/Cpu/Common.h"
#include "kiln/Runtime/Cpu/Fp8.h"
#include "kiln/Runtime/Cpu/Norm.h"
#include "kiln/Runtime/Cpu/CpuFusedGroup.h"
#include "kiln/Runtime/Plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

using namespace kiln::runtime;
using Op = GroupInstr::Op;
using Store = GroupOutput::Store;

namespace {

/// A tensor in f32, bf16 or FP8 storage.
struct Tensor {
  PlanValue value;
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> codes;

  Tensor(std::vector<int64_t> shape, DType dtype) {
    static int64_t nextId = 0;
    value.id = nextId++;
    value.shape = std::move(shape);
    value.dtype = dtype;
    if (dtype == DType::F32)
      f32.assign(value.numElements(), 0.0f);
    else if (isFp8(dtype))
      codes.assign(value.numElements(), 0);
    else
      bf16.assign(value.numElements(), 0);
  }
  View view() {
    void *data = value.dtype == DType::F32 ? static_cast<void *>(f32.data())
                 : isFp8(value.dtype)      ? static_cast<void *>(codes.data())
                                           : static_cast<void *>(bf16.data());
    return View{data, value.dtype, value.shape};
  }
  float at(int64_t i) const {
    return value.dtype == DType::F32 ? f32[i]
                                     : kiln::runtime::cpu::fromBf16Bits(bf16[i]);
  }
  void set(int64_t i, float x) {
    if (value.dtype == DType::F32)
      f32[i] = x;
    else
      bf16[i] = kiln::runtime::cpu::toBf16Bits(x);
  }
  void fill(std::mt19937 &rng, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    for (int64_t i = 0; i < value.numElements(); ++i)
      set(i, d(rng));
  }
};

struct Builder {
  FusedGroup g;
  int32_t add(Op op, std::vector<int32_t> args, DType type = DType::F32) {
    GroupInstr in;
    in.op = op;
    in.args = std::move(args);
    in.type = type;
    g.body.push_back(in);
    return static_cast<int32_t>(g.body.size() - 1);
  }
  int32_t load(int32_t operand, GroupKind kind, DType type) {
    GroupInstr in;
    in.op = Op::Load;
    in.operand = operand;
    in.kind = kind;
    in.type = type;
    g.body.push_back(in);
    return static_cast<int32_t>(g.body.size() - 1);
  }
  int32_t constant(double v) {
    int32_t i = add(Op::Const, {});
    g.body[i].value = v;
    return i;
  }
  void output(int32_t value, Store store = Store::Elem) {
    g.outputs.push_back({value, store});
  }
  /// Checks the group and runs it; returns the interpreter's message.
  std::string run(std::vector<Tensor *> in, std::vector<Tensor *> out,
                  bool check = false) {
    std::vector<const PlanValue *> iv, ov;
    std::vector<View> inViews, outViews;
    for (Tensor *t : in) {
      iv.push_back(&t->value);
      inViews.push_back(t->view());
    }
    for (Tensor *t : out) {
      ov.push_back(&t->value);
      outViews.push_back(t->view());
    }
    Error problem = checkFusedGroup(g, iv, ov);
    EXPECT_EQ(problem.message(), "");
    if (problem)
      return problem.takeMessage();
    return runFusedGroup(g, inViews, outViews, check).takeMessage();
  }
};

class ThreadCount {
public:
  explicit ThreadCount(int n) { kiln::runtime::cpu::setCpuThreads(n); }
  ~ThreadCount() { kiln::runtime::cpu::setCpuThreads(1); }
};

/// The group the compiler emits for rms_norm (docs/plan.md).
Builder rmsNormGroup(int64_t rows, int64_t cols, DType type, double eps) {
  Builder b;
  b.g.rows = rows;
  b.g.cols = cols;
  int32_t x = b.load(0, GroupKind::Elem, type);
  int32_t w = b.load(1, GroupKind::Col, type);
  int32_t sq = b.add(Op::Mul, {x, x});
  int32_t ss = b.add(Op::RowSum, {sq});
  int32_t ms = b.add(Op::Div, {ss, b.constant(static_cast<double>(cols))});
  int32_t r = b.add(Op::Rsqrt, {b.add(Op::Add, {ms, b.constant(eps)})});
  int32_t y = b.add(Op::Mul, {b.add(Op::Mul, {x, r}), w}, type);
  b.output(y);
  return b;
}

} // namespace

TEST(FusedGroup, RmsNormMatchesDoubleReferenceAndKernel) {
  std::mt19937 rng(1);
  const int64_t rows = 37, cols = 96;
  const double eps = 1e-5;
  Tensor x({rows, cols}, DType::F32), w({cols}, DType::F32),
      y({rows, cols}, DType::F32), kernel({rows, cols}, DType::F32);
  x.fill(rng, -2, 2);
  w.fill(rng, 0.5, 1.5);
  Builder b = rmsNormGroup(rows, cols, DType::F32, eps);
  ASSERT_EQ(b.run({&x, &w}, {&y}), "");
  kiln::runtime::cpu::rmsNorm(x.f32.data(), w.f32.data(), kernel.f32.data(),
                              nullptr, rows, cols, eps);
  for (int64_t t = 0; t < rows; ++t) {
    double ss = 0;
    for (int64_t c = 0; c < cols; ++c)
      ss += double(x.f32[t * cols + c]) * x.f32[t * cols + c];
    double r = 1 / std::sqrt(ss / cols + eps);
    for (int64_t c = 0; c < cols; ++c) {
      int64_t i = t * cols + c;
      double ref = x.f32[i] * r * w.f32[c];
      EXPECT_NEAR(y.f32[i], ref, 4e-7 * std::fabs(ref) + 1e-12) << i;
      EXPECT_NEAR(y.f32[i], kernel.f32[i], 4e-7 * std::fabs(ref) + 1e-12);
    }
  }
}

TEST(FusedGroup, Bf16InstructionsRoundWhereTheirTypeSays) {
  // y = bf16(bf16(a * b) + a): the product is rounded before the sum.
  std::mt19937 rng(2);
  const int64_t n = 10000; // two and a half flat tiles
  Tensor a({n}, DType::BF16), b({n}, DType::BF16), y({n}, DType::BF16);
  a.fill(rng, -3, 3);
  b.fill(rng, -3, 3);
  Builder g;
  g.g.rows = 1;
  g.g.cols = n;
  int32_t la = g.load(0, GroupKind::Elem, DType::BF16);
  int32_t lb = g.load(1, GroupKind::Elem, DType::BF16);
  int32_t p = g.add(Op::Mul, {la, lb}, DType::BF16);
  g.output(g.add(Op::Add, {p, la}, DType::BF16));
  ASSERT_EQ(g.run({&a, &b}, {&y}), "");
  using kiln::runtime::cpu::roundToBf16;
  int differs = 0;
  for (int64_t i = 0; i < n; ++i) {
    float expect = roundToBf16(roundToBf16(a.at(i) * b.at(i)) + a.at(i));
    ASSERT_EQ(y.at(i), expect) << i;
    differs += roundToBf16(a.at(i) * b.at(i) + a.at(i)) != expect;
  }
  EXPECT_GT(differs, 0) << "the test cannot tell rounded from unrounded";
}

TEST(FusedGroup, SiluMatchesItsFormula) {
  std::mt19937 rng(3);
  const int64_t n = 5000;
  Tensor x({n}, DType::F32), y({n}, DType::F32);
  x.fill(rng, -20, 20);
  Builder g;
  g.g.rows = 1;
  g.g.cols = n;
  int32_t lx = g.load(0, GroupKind::Elem, DType::F32);
  g.output(g.add(Op::Mul, {lx, g.add(Op::Sigmoid, {lx})}));
  ASSERT_EQ(g.run({&x}, {&y}), "");
  for (int64_t i = 0; i < n; ++i) {
    double xi = x.f32[i];
    double ref = xi / (1 + std::exp(-xi));
    EXPECT_NEAR(y.f32[i], ref, 3e-7 * std::fabs(ref) + 1e-30) << xi;
  }
}

TEST(FusedGroup, ColSumIsExactlyTheBlockedSumForAnyThreadCount) {
  std::mt19937 rng(4);
  const int64_t rows = 1100, cols = 33; // 18 blocks of rows, the last partial
  Tensor x({rows, cols}, DType::F32), s1({cols}, DType::F32),
      s2({cols}, DType::F32), sb({cols}, DType::BF16);
  x.fill(rng, -1, 1);
  auto build = [&] {
    Builder g;
    g.g.rows = rows;
    g.g.cols = cols;
    int32_t lx = g.load(0, GroupKind::Elem, DType::F32);
    g.output(g.add(Op::Mul, {lx, lx}), Store::ColSum);
    return g;
  };
  {
    ThreadCount one(1);
    Builder g = build();
    ASSERT_EQ(g.run({&x}, {&s1}), "");
    Builder h = build();
    ASSERT_EQ(h.run({&x}, {&sb}), "");
  }
  {
    ThreadCount two(2);
    Builder g = build();
    ASSERT_EQ(g.run({&x}, {&s2}), "");
  }
  for (int64_t c = 0; c < cols; ++c) {
    double total = 0;
    for (int64_t b0 = 0; b0 < rows; b0 += kColSumBlockRows) {
      double block = 0;
      for (int64_t t = b0; t < std::min(rows, b0 + kColSumBlockRows); ++t) {
        float v = x.f32[t * cols + c] * x.f32[t * cols + c];
        block += v;
      }
      total += block;
    }
    EXPECT_EQ(s1.f32[c], static_cast<float>(total)) << c;
    EXPECT_EQ(s2.f32[c], s1.f32[c]) << c;
    EXPECT_EQ(sb.at(c), kiln::runtime::cpu::roundToBf16(s1.f32[c]));
  }
}

namespace {

// The row_sum order of docs/plan.md, written as recursion: the sum of the
// partials first..first+count taken `stride` apart, split in halves whose
// elements are a stride apart (the tree the in-place pairwise additions
// build).
double strided(const std::vector<double> &v, size_t first, size_t stride,
               size_t count) {
  if (count == 1)
    return v[first];
  return strided(v, first, stride * 2, count / 2) +
         strided(v, first + stride, stride * 2, count / 2);
}

double documentedRowSum(const std::vector<float> &x) {
  const size_t chunk = 8, n = x.size();
  size_t partials = 32;
  while (partials < 1024 && partials * 32 <= n)
    partials *= 2;
  std::vector<double> partial(partials, 0.0);
  for (size_t c = 0; c < n; ++c)
    partial[(c / chunk) % partials] += x[c];
  std::vector<double> warps;
  for (size_t w = 0; w < partials; w += 32)
    warps.push_back(strided(
        std::vector<double>(partial.begin() + w, partial.begin() + w + 32), 0,
        1, 32));
  return strided(warps, 0, 1, warps.size());
}

} // namespace

TEST(FusedGroup, RowSumAddsChunkPartialsPairwise) {
  // Columns go into partials by chunks of 8, 32 partials for a row this
  // narrow: 2^60 (column 0, partial 0) and -2^60 (column 256, chunk 32,
  // partial 0 again) cancel while 1 (column 8, partial 1) stays, so the sum
  // is 1. In column order 2^60 + 1 would round to 2^60 and the sum be 0.
  const int64_t rows = 2, cols = 264;
  Tensor x({rows, cols}, DType::F32), sums({rows}, DType::F32);
  for (int64_t r = 0; r < rows; ++r) {
    x.f32[r * cols + 0] = 0x1p60f;
    x.f32[r * cols + 8] = 1.0f;
    x.f32[r * cols + 256] = -0x1p60f;
  }
  EXPECT_EQ(kiln::runtime::rowSum(x.f32.data(), cols), 1.0);
  Builder g;
  g.g.rows = rows;
  g.g.cols = cols;
  int32_t lx = g.load(0, GroupKind::Elem, DType::F32);
  g.output(g.add(Op::RowSum, {lx}), Store::Row);
  ASSERT_EQ(g.run({&x}, {&sums}), "");
  EXPECT_EQ(sums.f32[0], 1.0f);
  EXPECT_EQ(sums.f32[1], 1.0f);

  // Values of widely spread magnitudes, whose sum in another order rounds
  // differently, over widths that give 32 to 1024 partials, ragged chunks
  // included: the result is the documented tree's, bit for bit.
  std::mt19937 rng(3);
  for (int64_t n : {1, 7, 100, 1000, 1031, 3000, 4096, 5000, 20000, 40000}) {
    std::vector<float> v(n);
    for (float &e : v)
      e = std::ldexp(std::uniform_real_distribution<float>(-2, 2)(rng),
                     static_cast<int>(rng() % 80) - 40);
    EXPECT_EQ(kiln::runtime::rowSum(v.data(), n), documentedRowSum(v)) << n;
  }
  EXPECT_EQ(rowSumPartials(1000), 32);
  EXPECT_EQ(rowSumPartials(2048), 128);
  EXPECT_EQ(rowSumPartials(4096), 256);
  EXPECT_EQ(rowSumPartials(1 << 20), 1024);
}

TEST(FusedGroup, RowMaxPrefersPlusZero) {
  const int64_t rows = 1, cols = 3;
  Tensor x({rows, cols}, DType::F32), m({rows}, DType::F32);
  x.f32 = {-0.0f, 0.0f, -0.0f};
  Builder g;
  g.g.rows = rows;
  g.g.cols = cols;
  g.output(g.add(Op::RowMax, {g.load(0, GroupKind::Elem, DType::F32)}),
           Store::Row);
  ASSERT_EQ(g.run({&x}, {&m}), "");
  EXPECT_FALSE(std::signbit(m.f32[0]));
}

TEST(FusedGroup, RowValuesBroadcastAndStorePerRow) {
  // y[r, c] = x[r, c] - mean_r, and the means stored per row.
  std::mt19937 rng(5);
  const int64_t rows = 7, cols = 5;
  Tensor x({rows, cols}, DType::F32), y({rows, cols}, DType::F32),
      mean({rows}, DType::F32);
  x.fill(rng, -1, 1);
  Builder g;
  g.g.rows = rows;
  g.g.cols = cols;
  int32_t lx = g.load(0, GroupKind::Elem, DType::F32);
  int32_t m = g.add(Op::Div, {g.add(Op::RowSum, {lx}), g.constant(cols)});
  g.output(g.add(Op::Sub, {lx, m}));
  g.output(m, Store::Row);
  ASSERT_EQ(g.run({&x}, {&y, &mean}), "");
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t c = 0; c < cols; ++c)
      s += x.f32[r * cols + c];
    float expectMean = static_cast<float>(s) / static_cast<float>(cols);
    EXPECT_EQ(mean.f32[r], expectMean);
    for (int64_t c = 0; c < cols; ++c)
      EXPECT_EQ(y.f32[r * cols + c], x.f32[r * cols + c] - expectMean);
  }
}

TEST(FusedGroup, TransposeAndAmax) {
  std::mt19937 rng(6);
  const int64_t rows = 70, cols = 9;
  Tensor x({rows, cols}, DType::BF16), xt({cols, rows}, DType::BF16),
      amax({}, DType::F32);
  x.fill(rng, -4, 4);
  x.set(5 * cols + 3, -7.5f); // the largest magnitude, negative
  Builder g;
  g.g.rows = rows;
  g.g.cols = cols;
  int32_t lx = g.load(0, GroupKind::Elem, DType::BF16);
  g.output(lx, Store::Transpose);
  g.output(lx, Store::Amax);
  ASSERT_EQ(g.run({&x}, {&xt, &amax}), "");
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(xt.bf16[c * rows + r], x.bf16[r * cols + c]);
  EXPECT_EQ(amax.f32[0], 7.5f);
}

TEST(FusedGroup, AmaxPropagatesNaN) {
  Tensor x({3, 4}, DType::F32), amax({}, DType::F32);
  x.f32[7] = std::numeric_limits<float>::quiet_NaN();
  Builder g;
  g.g.rows = 3;
  g.g.cols = 4;
  g.output(g.load(0, GroupKind::Elem, DType::F32), Store::Amax);
  ASSERT_EQ(g.run({&x}, {&amax}), "");
  EXPECT_TRUE(std::isnan(amax.f32[0]));
}

TEST(FusedGroup, ReportsTheFirstNonFiniteValueItStores) {
  // log of x: x[3] = 0 gives -inf, x[9] < 0 gives NaN; output 1 is fine.
  Tensor x({2, 8}, DType::F32), y({2, 8}, DType::BF16), z({2, 8}, DType::F32);
  for (int64_t i = 0; i < 16; ++i)
    x.f32[i] = 1.0f + i;
  x.f32[9] = -1.0f;
  x.f32[3] = 0.0f;
  Builder g;
  g.g.rows = 2;
  g.g.cols = 8;
  int32_t lx = g.load(0, GroupKind::Elem, DType::F32);
  g.output(g.add(Op::Log, {lx}, DType::BF16));
  g.output(lx);
  EXPECT_EQ(g.run({&x}, {&y, &z}, /*check=*/true),
            "infinity in its result 0 at element 3");
  x.f32[3] = 1.0f;
  Builder h = g;
  EXPECT_EQ(h.run({&x}, {&y, &z}, /*check=*/true),
            "NaN in its result 0 at element 9");
  x.f32[9] = 2.0f;
  Builder k = g;
  EXPECT_EQ(k.run({&x}, {&y, &z}, /*check=*/true), "");
}

TEST(FusedGroup, CheckInfersKindsAndRejectsMisuse) {
  Tensor x({4, 3}, DType::F32), w({3}, DType::F32), r({4}, DType::F32),
      y({4, 3}, DType::F32);
  Builder g;
  g.g.rows = 4;
  g.g.cols = 3;
  int32_t lw = g.load(1, GroupKind::Col, DType::F32);
  int32_t lr = g.load(2, GroupKind::Row, DType::F32);
  int32_t wc = g.add(Op::Exp, {lw});
  int32_t rc = g.add(Op::Neg, {lr});
  int32_t both = g.add(Op::Mul, {wc, rc});
  g.output(both);
  std::vector<const PlanValue *> in{&x.value, &w.value, &r.value};
  EXPECT_FALSE(checkFusedGroup(g.g, in, {&y.value}));
  EXPECT_EQ(g.g.body[wc].kind, GroupKind::Col);
  EXPECT_EQ(g.g.body[rc].kind, GroupKind::Row);
  EXPECT_EQ(g.g.body[both].kind, GroupKind::Elem);

  Builder sumCol = g;
  sumCol.add(Op::RowSum, {wc});
  EXPECT_EQ(checkFusedGroup(sumCol.g, in, {&y.value}).message(),
            "instruction 5 (row_sum) reduces a value that is not per element");
  Builder inPlace = g;
  EXPECT_EQ(checkFusedGroup(inPlace.g, in, {&x.value}).message(),
            "output 0 (elem) writes value " + std::to_string(x.value.id) +
                ", which the group also reads");
}

// The groups kiln-fp8-linear's quantize lowers to (GroupLowering.cpp):
// codes bit-equal to the saturating cast of x * scale, the scale as the
// formula in KilnFp8Ops.td computes it in f32.
TEST(FusedGroup, TensorwiseQuantizeGivesTheCodesOfTheScaledValues) {
  const int64_t rows = 24, cols = 40;
  std::mt19937 rng(5);
  Tensor x({rows, cols}, DType::BF16), amax({}, DType::F32),
      q({rows, cols}, DType::F8E5M2), scale({}, DType::F32),
      qt({cols, rows}, DType::F8E5M2);
  x.fill(rng, -3.0f, 3.0f);
  x.set(7, 1e-6f); // small values land on e5m2 subnormals or zero
  x.set(8, -2.5e-4f);
  float a = 0;
  for (int64_t i = 0; i < rows * cols; ++i)
    a = std::max(a, std::fabs(x.at(i)));
  amax.f32[0] = a;

  Builder b;
  b.g.rows = rows;
  b.g.cols = cols;
  int32_t lx = b.load(0, GroupKind::Elem, DType::BF16);
  int32_t la = b.load(1, GroupKind::Scalar, DType::F32);
  int32_t s = b.add(Op::Div, {b.constant(57344.0),
                              b.add(Op::Max, {la, b.constant(1e-12)})});
  int32_t codes = b.add(Op::Convert, {b.add(Op::Mul, {lx, s})}, DType::F8E5M2);
  b.output(codes);
  b.output(s, Store::Scalar);
  b.output(codes, Store::Transpose);
  ASSERT_EQ(b.run({&x, &amax}, {&q, &scale, &qt}), "");

  float want = 57344.0f / std::max(a, 1e-12f);
  EXPECT_EQ(scale.f32[0], want);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      uint8_t code = kiln::runtime::cpu::toE5m2(x.at(r * cols + c) * want);
      EXPECT_EQ(q.codes[r * cols + c], code) << r << "," << c;
      EXPECT_EQ(qt.codes[c * rows + r], code) << r << "," << c;
    }
}

TEST(FusedGroup, RowwiseQuantizeScalesEachRowByAPowerOfTwo) {
  const int64_t rows = 9, cols = 33;
  std::mt19937 rng(6);
  Tensor x({rows, cols}, DType::BF16), q({rows, cols}, DType::F8E4M3),
      scale({rows}, DType::F32);
  x.fill(rng, -1.0f, 1.0f);
  for (int64_t c = 0; c < cols; ++c)
    x.set(2 * cols + c, 0.0f);                 // an all-zero row
  x.set(4 * cols + 3, 900.0f);                 // a row with a large value

  Builder b;
  b.g.rows = rows;
  b.g.cols = cols;
  int32_t lx = b.load(0, GroupKind::Elem, DType::BF16);
  int32_t a = b.add(Op::RowMax, {b.add(Op::Abs, {lx})});
  int32_t s = b.add(Op::Pow2Floor,
                    {b.add(Op::Div, {b.constant(448.0),
                                     b.add(Op::Max, {a, b.constant(1e-12)})})});
  b.output(b.add(Op::Convert, {b.add(Op::Mul, {lx, s})}, DType::F8E4M3));
  b.output(s, Store::Row);
  ASSERT_EQ(b.run({&x}, {&q, &scale}), "");

  for (int64_t r = 0; r < rows; ++r) {
    float m = 0;
    for (int64_t c = 0; c < cols; ++c)
      m = std::max(m, std::fabs(x.at(r * cols + c)));
    float exact = 448.0f / std::max(m, 1e-12f);
    float want = std::exp2(std::floor(std::log2(exact)));
    EXPECT_EQ(scale.f32[r], want) << "row " << r;
    EXPECT_LE(want, exact);
    EXPECT_GT(want * 2, exact);
    for (int64_t c = 0; c < cols; ++c)
      EXPECT_EQ(q.codes[r * cols + c],
                kiln::runtime::cpu::toE4m3(x.at(r * cols + c) * want))
          << r << "," << c;
  }
}
