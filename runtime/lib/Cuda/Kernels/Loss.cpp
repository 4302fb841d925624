//===- Loss.cpp - The cross-entropy kernels: CUDA C++ and launches --------===//
//
// One block per row: its log-sum-exp in double through a fixed tree over
// the block, then each row's loss into scratch and one block for their
// mean (the forward), or the row's softmax minus the one-hot target,
// scaled by dloss / rows (the backward).
//
// Loss parallel (docs/tp.md "The ends of the model") on a rank's slice of
// the vocabulary: the ids as floats (a thread per id); each row's max over
// the slice's valid columns (a block per row, the first of the equal
// maxima as the CPU's sequential max keeps it); each row's sum of exp in
// double as a tree and its target logit (a block per row); the gradient
// of the statistics (a block per row); the mean loss (one block, a tree
// over the rows); its gradient (a thread per row). Columns at or past the
// vocabulary's end (the padding) are left out, and get a zero gradient.
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

// out[i] = (float)ids[i]. 0 ids (i32), 1 out (f32), 2 count.
extern "C" __global__ void kiln_index_to_float(KilnOpArgs a) {
  const int *ids = (const int *)a.s[0].p;
  float *out = (float *)a.s[1].p;
  for (kiln_i64 i = kiln_thread(); i < a.s[2].i; i += kiln_threads())
    out[i] = (float)ids[i];
}

// The largest of the block's v[0, blockDim.x), the first by index (at[])
// among equal ones (+0 and -0 are equal): what a sequential max that only
// takes a strictly larger value returns. Every thread gets the result.
__device__ __forceinline__ float kiln_block_first_max(float *v, kiln_i64 *at) {
  __syncthreads();
  for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
    unsigned l = threadIdx.x, r = threadIdx.x + w;
    if (l < w && (v[r] > v[l] || (v[r] == v[l] && at[r] < at[l]))) {
      v[l] = v[r];
      at[l] = at[r];
    }
    __syncthreads();
  }
  float m = v[0];
  __syncthreads();
  return m;
}

// The target of a row as a column of the slice: -1 (no column) when the
// target is in another slice, -2 when it is not an id in [0, vocab).
__device__ __forceinline__ kiln_i64 kiln_slice_target(float target,
                                                      kiln_i64 start,
                                                      kiln_i64 valid,
                                                      kiln_i64 vocab) {
  if (!(target >= 0.0f && target < (float)vocab) || target != floorf(target))
    return -2;
  kiln_i64 t = (kiln_i64)target - start;
  return t >= 0 && t < valid ? t : -1;
}

// max[n] = the largest of the row's first `valid` columns (-inf when none).
// 0 logits, 1 dtype, 2 max (f32), 3 slice, 4 valid. Blocks of 256.
extern "C" __global__ void kiln_vocab_parallel_max(KilnOpArgs a) {
  __shared__ float fs[256];
  __shared__ kiln_i64 at[256];
  kiln_i64 n = blockIdx.x, slice = a.s[3].i, valid = a.s[4].i;
  int t = (int)a.s[1].i;
  float m = KILN_NEG_INF;
  kiln_i64 first = valid;
  for (kiln_i64 i = threadIdx.x; i < valid; i += blockDim.x) {
    float v = kiln_load(a.s[0].p, t, n * slice + i);
    if (v > m) {
      m = v;
      first = i;
    }
  }
  fs[threadIdx.x] = m;
  at[threadIdx.x] = first;
  m = kiln_block_first_max(fs, at);
  if (threadIdx.x == 0)
    ((float *)a.s[2].p)[n] = m;
}

// stats[n] = (sum over the valid columns of exp(x - max[n]) in double,
// rounded to float; the target's logit if it is a column of the slice, else
// 0), both NaN for a target that is not an id. 0 logits, 1 dtype, 2 max,
// 3 targets (f32), 4 stats, 5 slice, 6 valid, 7 vocab_start, 8 vocab_size.
// Blocks of 256.
extern "C" __global__ void kiln_vocab_parallel_stats(KilnOpArgs a) {
  __shared__ double ds[256];
  kiln_i64 n = blockIdx.x, slice = a.s[5].i, valid = a.s[6].i;
  int t = (int)a.s[1].i;
  float m = ((const float *)a.s[2].p)[n];
  double sum = 0;
  for (kiln_i64 i = threadIdx.x; i < valid; i += blockDim.x)
    sum += (double)expf(kiln_load(a.s[0].p, t, n * slice + i) - m);
  ds[threadIdx.x] = sum;
  sum = kiln_block_sum(ds);
  if (threadIdx.x != 0)
    return;
  kiln_i64 c = kiln_slice_target(((const float *)a.s[3].p)[n], a.s[7].i,
                                 valid, a.s[8].i);
  float *stats = (float *)a.s[4].p, nan = __int_as_float(0x7fc00000);
  stats[2 * n] = c == -2 ? nan : (float)sum;
  stats[2 * n + 1] =
      c == -2 ? nan : c >= 0 ? kiln_load(a.s[0].p, t, n * slice + c) : 0.0f;
}

// dx = dstats[n, 0] exp(x - max[n]) + (dstats[n, 1] at the target's column,
// else 0) on the valid columns, 0 on the padding; a NaN row for a target
// that is not an id. 0 dstats, 1 logits, 2 dtype, 3 max, 4 targets, 5 dx,
// 6 dtype, 7 slice, 8 valid, 9 vocab_start, 10 vocab_size. Blocks of 256.
extern "C" __global__ void kiln_vocab_parallel_stats_grad(KilnOpArgs a) {
  kiln_i64 n = blockIdx.x, slice = a.s[7].i, valid = a.s[8].i;
  int lt = (int)a.s[2].i, gt = (int)a.s[6].i;
  const float *dstats = (const float *)a.s[0].p;
  float d0 = dstats[2 * n], d1 = dstats[2 * n + 1];
  float m = ((const float *)a.s[3].p)[n];
  kiln_i64 c = kiln_slice_target(((const float *)a.s[4].p)[n], a.s[9].i,
                                 valid, a.s[10].i);
  for (kiln_i64 i = threadIdx.x; i < slice; i += blockDim.x) {
    float g = i < valid ? d0 * expf(kiln_load(a.s[1].p, lt, n * slice + i) -
                                    m) + (i == c ? d1 : 0.0f)
                        : 0.0f;
    kiln_store(a.s[5].p, gt, n * slice + i,
               c == -2 ? __int_as_float(0x7fc00000) : g);
  }
}

// loss = (sum over the rows of log(stats[n, 0]) + max[n] - stats[n, 1], in
// double as a tree) / rows, rounded to float. One block of 256. 0 stats,
// 1 max, 2 rows, 3 loss (f32).
extern "C" __global__ void kiln_vocab_parallel_loss(KilnOpArgs a) {
  __shared__ double ds[256];
  const float *stats = (const float *)a.s[0].p, *max = (const float *)a.s[1].p;
  kiln_i64 rows = a.s[2].i;
  double sum = 0;
  for (kiln_i64 n = threadIdx.x; n < rows; n += blockDim.x)
    sum += log((double)stats[2 * n]) + (double)max[n] - (double)stats[2 * n + 1];
  ds[threadIdx.x] = sum;
  double total = kiln_block_sum(ds);
  if (threadIdx.x == 0)
    *(float *)a.s[3].p = (float)(total / (double)rows);
}

// dstats[n] = (dloss / rows / stats[n, 0], -dloss / rows), the scale in
// double. 0 dloss (f32), 1 stats, 2 dstats, 3 rows.
extern "C" __global__ void kiln_vocab_parallel_loss_grad(KilnOpArgs a) {
  const float *stats = (const float *)a.s[1].p;
  float *dstats = (float *)a.s[2].p;
  kiln_i64 rows = a.s[3].i;
  double scale = (double)*(const float *)a.s[0].p / (double)rows;
  for (kiln_i64 n = kiln_thread(); n < rows; n += kiln_threads()) {
    dstats[2 * n] = (float)(scale / (double)stats[2 * n]);
    dstats[2 * n + 1] = (float)-scale;
  }
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

Result indexToFloat(const Step &s) {
  if (Error e = s.shaped(1, 1, 0, {}, {0}))
    return e;
  if (s.in(0).dtype != DType::I32)
    return s.fail("needs i32 ids");
  int64_t n = s.in(0).numElements();
  if (s.out(0).numElements() != n)
    return s.fail("needs a result per id");
  OpLaunchPlan p;
  if (n > 0)
    p.launches.push_back(elementwise("kiln_index_to_float", n,
                                     {operand(0), result(0), integer(n)}));
  return p;
}

Result vocabParallel(const Step &s) {
  using plan::Op;
  Op op = s.step.kind;
  OpLaunchPlan p;
  if (op == Op::VocabParallelLoss || op == Op::VocabParallelLossGrad) {
    // stats [rows, 2], max [rows] -> loss; dloss, stats -> dstats.
    bool grad = op == Op::VocabParallelLossGrad;
    if (Error e = s.shaped(2, 1, 0, {0, 1}, {0}))
      return e;
    const PlanValue &stats = s.in(grad ? 1 : 0);
    int64_t rows = grad ? stats.numElements() / 2 : s.in(1).numElements();
    if (stats.numElements() != 2 * rows ||
        s.out(0).numElements() != (grad ? 2 * rows : 1) ||
        (grad && s.in(0).numElements() != 1))
      return s.fail("needs statistics [rows, 2]" +
                    std::string(grad ? ", a scalar dloss and dstats like them"
                                     : ", a max per row and a scalar loss"));
    if (grad) {
      if (rows > 0)
        p.launches.push_back(
            elementwise("kiln_vocab_parallel_loss_grad", rows,
                        {operand(0), operand(1), result(0), integer(rows)}));
    } else {
      p.launches.push_back(
          {"kiln_vocab_parallel_loss",
           1,
           256,
           0,
           {operand(0), operand(1), integer(rows), result(0)}});
    }
    return p;
  }
  // max: logits -> max; stats: logits, max, targets -> stats; stats_grad:
  // dstats, logits, max, targets -> dlogits.
  bool grad = op == Op::VocabParallelStatsGrad;
  size_t l = grad ? 1 : 0, operands = op == Op::VocabParallelMax ? 1 : 3;
  Error shape = grad                         ? s.shaped(4, 1, 0, {0, 2, 3}, {})
                : op == Op::VocabParallelMax ? s.shaped(1, 1, 0, {}, {0})
                                             : s.shaped(3, 1, 0, {1, 2}, {0});
  if (shape)
    return shape;
  const PlanValue &x = s.in(l);
  if (!isFloat(x.dtype) || (grad && !isFloat(s.out(0).dtype)))
    return s.fail("needs float logits and results");
  if (x.shape.empty() || x.shape.back() <= 0)
    return s.fail("needs logits [..., slice]");
  int64_t slice = x.shape.back(), rows = x.numElements() / slice;
  int64_t start = s.step.i64("vocab_start"), vocab = s.step.i64("vocab_size");
  if (start < 0 || start >= vocab)
    return s.fail("needs 0 <= vocab_start < vocab_size");
  int64_t valid = std::min(vocab - start, slice);
  for (size_t i = l + 1; i < l + operands; ++i)
    if (s.in(i).numElements() != rows)
      return s.fail("needs a max and a target per row");
  int64_t outCount = op == Op::VocabParallelMax ? rows
                     : grad                     ? rows * slice
                                                : 2 * rows;
  if (s.out(0).numElements() != outCount ||
      (grad && s.in(0).numElements() != 2 * rows))
    return s.fail("has a result or statistics of the wrong size");
  if (rows == 0)
    return p;
  if (op == Op::VocabParallelMax)
    p.launches.push_back({"kiln_vocab_parallel_max",
                          rows,
                          256,
                          0,
                          {operand(0), code(x.dtype), result(0), integer(slice),
                           integer(valid)}});
  else if (!grad)
    p.launches.push_back(
        {"kiln_vocab_parallel_stats",
         rows,
         256,
         0,
         {operand(0), code(x.dtype), operand(1), operand(2), result(0),
          integer(slice), integer(valid), integer(start), integer(vocab)}});
  else
    p.launches.push_back(
        {"kiln_vocab_parallel_stats_grad",
         rows,
         256,
         0,
         {operand(0), operand(1), code(x.dtype), operand(2), operand(3),
          result(0), code(s.out(0).dtype), integer(slice), integer(valid),
          integer(start), integer(vocab)}});
  return p;
}

} // namespace kiln::runtime::cuda::kernels
