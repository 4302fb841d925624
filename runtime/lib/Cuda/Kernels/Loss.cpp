//===- Loss.cpp - The cross-entropy kernels: CUDA C++ and launches --------===//
//
// One block per row: its log-sum-exp in double through a fixed tree over
// the block, then each row's loss into scratch and one block for their
// mean (the forward), or the row's softmax minus the one-hot target,
// scaled by dloss / rows (the backward).
//
//===----------------------------------------------------------------------===//

#include "Families.h"
#include "Launch.h"

namespace kiln::runtime::cuda::kernels {

namespace {

const char *kSource = R"(
// The row's maximum and sum of exp(x - max) in double (a tree over the
// block); returns log-sum-exp in double.
__device__ __forceinline__ double kiln_row_lse(const void *x, int t,
                                               kiln_i64 base, kiln_i64 vocab,
                                               float *fs, double *ds) {
  float m = KILN_NEG_INF;
  for (kiln_i64 i = threadIdx.x; i < vocab; i += blockDim.x) {
    float v = kiln_load(x, t, base + i);
    m = v > m ? v : m;
  }
  fs[threadIdx.x] = m;
  m = kiln_block_max(fs);
  double sum = 0;
  for (kiln_i64 i = threadIdx.x; i < vocab; i += blockDim.x)
    sum += (double)expf(kiln_load(x, t, base + i) - m);
  ds[threadIdx.x] = sum;
  return (double)m + log(kiln_block_sum(ds));
}

// loss[n] = lse(row n) - x[n, target] in double (NaN for a target outside
// the vocabulary). 0 logits, 1 dtype, 2 targets (i32), 3 losses (double),
// 4 vocab. Blocks of 256.
extern "C" __global__ void kiln_cross_entropy_rows(KilnOpArgs a) {
  __shared__ float fs[256];
  __shared__ double ds[256];
  kiln_i64 n = blockIdx.x, vocab = a.s[4].i;
  int t = (int)a.s[1].i, target = ((const int *)a.s[2].p)[n];
  double lse = kiln_row_lse(a.s[0].p, t, n * vocab, vocab, fs, ds);
  if (threadIdx.x == 0)
    ((double *)a.s[3].p)[n] =
        target < 0 || target >= vocab
            ? (double)__int_as_float(0x7fc00000)
            : lse - (double)kiln_load(a.s[0].p, t, n * vocab + target);
}

// loss = (sum of the rows' losses) / rows, rounded to float. One block of
// 256. 0 losses, 1 rows, 2 loss, 3 dtype.
extern "C" __global__ void kiln_cross_entropy_total(KilnOpArgs a) {
  __shared__ double ds[256];
  const double *rowLoss = (const double *)a.s[0].p;
  kiln_i64 rows = a.s[1].i;
  double sum = 0;
  for (kiln_i64 i = threadIdx.x; i < rows; i += blockDim.x)
    sum += rowLoss[i];
  ds[threadIdx.x] = sum;
  double total = kiln_block_sum(ds);
  if (threadIdx.x == 0)
    kiln_store(a.s[2].p, (int)a.s[3].i, 0, (float)(total / (double)rows));
}

// dx = (softmax(x) - onehot(target)) * dloss / rows, one block per row.
// 0 dloss, 1 dtype, 2 logits, 3 dtype, 4 targets, 5 dx, 6 dtype, 7 rows,
// 8 vocab. Blocks of 256.
extern "C" __global__ void kiln_cross_entropy_grad(KilnOpArgs a) {
  __shared__ float fs[256];
  __shared__ double ds[256];
  kiln_i64 n = blockIdx.x, rows = a.s[7].i, vocab = a.s[8].i;
  int lt = (int)a.s[3].i, gt = (int)a.s[6].i;
  int target = ((const int *)a.s[4].p)[n];
  float dloss = kiln_load(a.s[0].p, (int)a.s[1].i, 0);
  float scale = (float)((double)dloss / (double)rows);
  float lse = (float)kiln_row_lse(a.s[2].p, lt, n * vocab, vocab, fs, ds);
  bool bad = target < 0 || target >= vocab;
  for (kiln_i64 i = threadIdx.x; i < vocab; i += blockDim.x) {
    float p = expf(kiln_load(a.s[2].p, lt, n * vocab + i) - lse);
    float g = (i == target ? p - 1.0f : p) * scale;
    kiln_store(a.s[5].p, gt, n * vocab + i,
               bad ? __int_as_float(0x7fc00000) : g);
  }
}
)";

} // namespace

const char *lossSource() { return kSource; }

Result crossEntropy(const Step &s, bool grad) {
  // Operands: logits, targets (grad: dloss, logits, targets).
  int logits = grad ? 1 : 0;
  if (Error e = s.shaped(grad ? 3 : 2, 1, 0, {}, {}))
    return e;
  const PlanValue &x = s.in(logits), &targets = s.in(logits + 1);
  if (!isFloat(x.dtype) || !isFloat(s.out(0).dtype) ||
      (grad && !isFloat(s.in(0).dtype)))
    return s.fail("needs float logits and results");
  if (targets.dtype != DType::I32)
    return s.fail("needs i32 targets");
  if (x.shape.empty() || x.shape.back() <= 0)
    return s.fail("needs logits [..., vocab]");
  int64_t vocab = x.shape.back(), rows = x.numElements() / vocab;
  if (targets.numElements() != rows)
    return s.fail("needs a target per row");
  OpLaunchPlan p;
  if (rows == 0)
    return p;
  if (grad) {
    p.launches.push_back(
        {"kiln_cross_entropy_grad", rows, 256, 0,
         {operand(0), code(s.in(0).dtype), operand(1), code(x.dtype),
          operand(2), result(0), code(s.out(0).dtype), integer(rows),
          integer(vocab)}});
    return p;
  }
  p.scratchBytes = rows * 8; // each row's loss, in double
  p.launches.push_back({"kiln_cross_entropy_rows", rows, 256, 0,
                        {operand(0), code(x.dtype), operand(1), scratch(0),
                         integer(vocab)}});
  p.launches.push_back({"kiln_cross_entropy_total", 1, 256, 0,
                        {scratch(0), integer(rows), result(0),
                         code(s.out(0).dtype)}});
  return p;
}

} // namespace kiln::runtime::cuda::kernels
