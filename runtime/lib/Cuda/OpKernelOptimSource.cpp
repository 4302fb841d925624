//===- OpKernelOptimSource.cpp - Optimizer and FP8 op kernels -------------===//
//
// Part of the op kernel library's text (OpKernelSource.cpp): the gradient
// norm, the learning-rate schedule, AdamW, the delayed recipe's amax
// history, the FP8 all-gather's shard casts and the mean of a collective.
// Scalars that every element needs (AdamW's coefficients) are computed
// once by a one-thread kernel into scratch, in the CPU backend's order of
// double and float operations, so the elementwise kernel is the CPU's loop.
//
//===----------------------------------------------------------------------===//

namespace kiln::runtime::cuda {

namespace {

const char *kOptim = R"(
// Sum of squares, in double, of the chunks of up to 6 f32 tensors: block
// b takes chunk b of the concatenated chunk list (KILN_SUMSQ_CHUNK elements
// each; the grid is their count) and writes its sum to partials[first + b]. 0 partials (double),
// 1 first, 2 count, then (pointer, n) per tensor. Blocks of 256.
#define KILN_SUMSQ_CHUNK 16384
extern "C" __global__ void kiln_sum_squares(KilnOpArgs a) {
  __shared__ double ds[256];
  kiln_i64 b = blockIdx.x;
  int count = (int)a.s[2].i, k = 0;
  kiln_i64 chunks = 0;
  for (; k < count; ++k) {
    chunks = (a.s[4 + 2 * k].i + KILN_SUMSQ_CHUNK - 1) / KILN_SUMSQ_CHUNK;
    if (b < chunks)
      break;
    b -= chunks;
  }
  if (k == count) // past the chunks (not launched so): nothing to add
    return;
  const float *x = (const float *)a.s[3 + 2 * k].p;
  kiln_i64 n = a.s[4 + 2 * k].i, lo = b * KILN_SUMSQ_CHUNK;
  kiln_i64 hi = lo + KILN_SUMSQ_CHUNK < n ? lo + KILN_SUMSQ_CHUNK : n;
  double sum = 0;
  for (kiln_i64 i = lo + threadIdx.x; i < hi; i += blockDim.x)
    sum += (double)x[i] * (double)x[i];
  ds[threadIdx.x] = sum;
  double total = kiln_block_sum(ds);
  if (threadIdx.x == 0)
    ((double *)a.s[0].p)[a.s[1].i + blockIdx.x] = total;
}

// The norm (or, `squared`, its square) of the partials' sum. One block of
// 256. 0 partials, 1 count, 2 out (f32), 3 squared.
extern "C" __global__ void kiln_grad_norm(KilnOpArgs a) {
  __shared__ double ds[256];
  const double *part = (const double *)a.s[0].p;
  kiln_i64 count = a.s[1].i;
  double sum = 0;
  for (kiln_i64 i = threadIdx.x; i < count; i += blockDim.x)
    sum += part[i];
  ds[threadIdx.x] = sum;
  double total = kiln_block_sum(ds);
  if (threadIdx.x == 0) {
    double norm = sqrt(total);
    ((float *)a.s[2].p)[0] = (float)(a.s[3].i ? norm * norm : norm);
  }
}

// Linear warmup, then cosine decay (or constant), in double. One thread.
// 0 step (i64), 1 out (f32), 2 warmup, 3 total, 4 peak, 5 min, 6 cosine.
extern "C" __global__ void kiln_lr_schedule(KilnOpArgs a) {
  kiln_i64 step = *(const kiln_i64 *)a.s[0].p, warmupSteps = a.s[2].i;
  double peak = a.s[4].f, minLr = a.s[5].f, lr = peak;
  if (warmupSteps > 0 && step <= warmupSteps) {
    lr = peak * (double)step / (double)warmupSteps;
  } else if (a.s[6].i) {
    kiln_i64 warmup = warmupSteps > 0 ? warmupSteps : 0;
    kiln_i64 span = a.s[3].i - warmup > 1 ? a.s[3].i - warmup : 1;
    double p = (double)(step - warmup) / (double)span;
    p = p < 0.0 ? 0.0 : p > 1.0 ? 1.0 : p;
    lr = minLr + (peak - minLr) * (1.0 + cos(3.14159265358979323846 * p)) / 2.0;
  }
  *(float *)a.s[1].p = (float)lr;
}

// AdamW's per-step scalars, as runtime/lib/Cpu/Optim.cpp computes them:
// c[0] the clip coefficient, then decay, 1 - beta1, beta2, 1 - beta2,
// -step size, sqrt(bias correction 2), eps. One thread. 0 grad norm (f32),
// 1 lr (f32), 2 step (i64), 3 c (f32[8]), 4 beta1, 5 beta2, 6 eps,
// 7 weight decay, 8 max norm.
extern "C" __global__ void kiln_adamw_scalars(KilnOpArgs a) {
  float *c = (float *)a.s[3].p;
  double lr = (double)*(const float *)a.s[1].p;
  double t = (double)*(const kiln_i64 *)a.s[2].p;
  double beta1 = a.s[4].f, beta2 = a.s[5].f, maxNorm = a.s[8].f;
  double bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
  float clip = 1.0f;
  if (maxNorm > 0) {
    float reciprocal = 1.0f / (*(const float *)a.s[0].p + 1e-6f);
    clip = reciprocal * (float)maxNorm;
    clip = clip != clip ? clip : (1.0f < clip ? 1.0f : clip);
  }
  c[0] = clip;
  c[1] = (float)(1.0 - lr * a.s[7].f);
  c[2] = (float)(1.0 - beta1);
  c[3] = (float)beta2;
  c[4] = (float)(1.0 - beta2);
  c[5] = (float)(-(lr / bc1));
  c[6] = (float)sqrt(bc2);
  c[7] = (float)a.s[6].f;
}

// One AdamW step of element i (the CPU's loop body); the results may be
// the operands' buffers. c: the step's scalars (kiln_adamw_scalars).
__device__ __forceinline__ void kiln_adamw_element(
    const float *c, const float *param, const void *grad, int gradType,
    const float *expAvg, const float *expAvgSq, float *paramOut,
    float *expAvgOut, float *expAvgSqOut, kiln_i64 i) {
  const float clip = c[0], decay = c[1], w = c[2], beta2 = c[3],
              oneMinusBeta2 = c[4], negStepSize = c[5], bc2Sqrt = c[6],
              eps = c[7];
  float g = kiln_load(grad, gradType, i) * clip;
  float p = param[i] * decay;
  float mi = expAvg[i];
  mi = fabsf(w) < 0.5f ? mi + w * (g - mi) : g - (g - mi) * (1.0f - w);
  float vi = expAvgSq[i] * beta2;
  vi = vi + oneMinusBeta2 * g * g;
  float denom = sqrtf(vi) / bc2Sqrt + eps;
  p = p + negStepSize * mi / denom;
  expAvgOut[i] = mi;
  expAvgSqOut[i] = vi;
  paramOut[i] = p;
}

// One AdamW step per element; the results may be the operands' buffers.
// 0 param, 1 grad, 2 grad dtype, 3 exp_avg, 4 exp_avg_sq, 5 param out,
// 6 exp_avg out, 7 exp_avg_sq out, 8 scalars, 9 n.
extern "C" __global__ void kiln_adamw(KilnOpArgs a) {
  kiln_i64 n = a.s[9].i;
  for (kiln_i64 i = kiln_thread(); i < n; i += kiln_threads())
    kiln_adamw_element((const float *)a.s[8].p, (const float *)a.s[0].p,
                       a.s[1].p, (int)a.s[2].i, (const float *)a.s[3].p,
                       (const float *)a.s[4].p, (float *)a.s[5].p,
                       (float *)a.s[6].p, (float *)a.s[7].p, i);
}

// AdamW over many parameters in one launch, each updated in place: block b
// takes chunk b of the concatenated chunk list (KILN_ADAMW_CHUNK elements
// each; the grid is their count). 0 scalars, 1 count, then per parameter
// (param, grad, grad dtype, exp_avg, exp_avg_sq, n). Blocks of 256.
#define KILN_ADAMW_CHUNK 4096
extern "C" __global__ void kiln_adamw_list(KilnOpListArgs a) {
  kiln_i64 b = blockIdx.x;
  int count = (int)a.s[1].i, k = 0;
  for (; k < count; ++k) {
    kiln_i64 chunks = (a.s[7 + 6 * k].i + KILN_ADAMW_CHUNK - 1) / KILN_ADAMW_CHUNK;
    if (b < chunks)
      break;
    b -= chunks;
  }
  if (k == count) // past the chunks (not launched so): nothing to do
    return;
  const KilnSlot *t = a.s + 2 + 6 * k;
  kiln_i64 n = t[5].i, lo = b * KILN_ADAMW_CHUNK;
  kiln_i64 hi = lo + KILN_ADAMW_CHUNK < n ? lo + KILN_ADAMW_CHUNK : n;
  for (kiln_i64 i = lo + threadIdx.x; i < hi; i += blockDim.x)
    kiln_adamw_element((const float *)a.s[0].p, (const float *)t[0].p, t[1].p,
                       (int)t[2].i, (const float *)t[3].p,
                       (const float *)t[4].p, (float *)t[0].p, (float *)t[3].p,
                       (float *)t[4].p, i);
}

// The history's maximum (or its newest entry); with a current amax, that
// stands in for an empty (non-positive) history. One thread.
// 0 history, 1 n, 2 max, 3 current or null, 4 out.
extern "C" __global__ void kiln_delayed_amax(KilnOpArgs a) {
  const float *history = (const float *)a.s[0].p;
  float h = history[0];
  if (a.s[2].i)
    for (kiln_i64 i = 1; i < a.s[1].i; ++i)
      h = h < history[i] ? history[i] : h;
  const float *current = (const float *)a.s[3].p;
  *(float *)a.s[4].p = current && !(h > 0.0f) ? *current : h;
}

// out = [amax, history[0], ..., history[n - 2]]; out may be history's own
// buffer, so one thread moves the entries from the back. 0 history,
// 1 amax, 2 out, 3 n.
extern "C" __global__ void kiln_amax_history_update(KilnOpArgs a) {
  const float *history = (const float *)a.s[0].p;
  float *out = (float *)a.s[2].p;
  float amax = *(const float *)a.s[1].p;
  for (kiln_i64 i = a.s[3].i - 1; i > 0; --i)
    out[i] = history[i - 1];
  out[0] = amax;
}

// amax[index] = max |shard[begin, begin + size)|, NaN winning, as the bits
// of |x| compared as integers (order-free, so an integer atomicMax across
// blocks keeps it deterministic). amax starts at zero. 0 shard, 1 dtype,
// 2 begin, 3 size, 4 amax (f32), 5 index. Blocks of 256.
extern "C" __global__ void kiln_shard_amax(KilnOpArgs a) {
  __shared__ unsigned us[256];
  int t = (int)a.s[1].i;
  kiln_i64 begin = a.s[2].i, size = a.s[3].i;
  unsigned m = 0;
  for (kiln_i64 j = kiln_thread(); j < size; j += kiln_threads()) {
    unsigned u = __float_as_uint(kiln_load(a.s[0].p, t, begin + j)) & 0x7fffffffu;
    m = u > m ? u : m;
  }
  us[threadIdx.x] = m;
  __syncthreads();
  for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w && us[threadIdx.x + w] > us[threadIdx.x])
      us[threadIdx.x] = us[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    atomicMax((unsigned *)a.s[4].p + a.s[5].i, us[0]);
}

// scale[i] = 448 / max(amax[i], 1e-12) for i < count. 0 amax, 1 scales,
// 2 count.
extern "C" __global__ void kiln_shard_scales(KilnOpArgs a) {
  const float *amax = (const float *)a.s[0].p;
  for (kiln_i64 i = kiln_thread(); i < a.s[2].i; i += kiln_threads()) {
    float m = amax[i] < 1e-12f ? 1e-12f : amax[i];
    ((float *)a.s[1].p)[i] = 448.0f / m;
  }
}

// codes[begin + j] = e4m3(shard[begin + j] * scales[index]) for j < size.
// 0 shard, 1 dtype, 2 begin, 3 size, 4 scales, 5 index, 6 codes.
extern "C" __global__ void kiln_shard_quantize(KilnOpArgs a) {
  int t = (int)a.s[1].i;
  kiln_i64 begin = a.s[2].i, size = a.s[3].i;
  float scale = ((const float *)a.s[4].p)[a.s[5].i];
  for (kiln_i64 j = kiln_thread(); j < size; j += kiln_threads())
    kiln_store(a.s[6].p, KILN_E4M3, begin + j,
               kiln_load(a.s[0].p, t, begin + j) * scale);
}

// x = x / divisor in f32, rounded to x's dtype. 0 x, 1 dtype, 2 n,
// 3 divisor.
extern "C" __global__ void kiln_mean_divide(KilnOpArgs a) {
  int t = (int)a.s[1].i;
  float d = (float)a.s[3].f;
  for (kiln_i64 i = kiln_thread(); i < a.s[2].i; i += kiln_threads())
    kiln_store(a.s[0].p, t, i, kiln_load(a.s[0].p, t, i) / d);
}

// The per-op numerics check: a tensor's first non-finite value, as the
// key base | element << 1 | (infinity ? 1 : 0), complemented and merged
// into the flag by atomicMax, so that the flag (zero: none) ends as the
// smallest key of the run: the earliest step, result and element.
// 0 tensor, 1 flag (u64), 2 dtype, 3 n, 4 key base, 5 largest element.
extern "C" __global__ void kiln_check_finite(KilnOpArgs a) {
  int t = (int)a.s[2].i;
  kiln_i64 n = a.s[3].i, most = a.s[5].i;
  unsigned long long best = 0;
  for (kiln_i64 i = kiln_thread(); i < n; i += kiln_threads()) {
    float x = kiln_load(a.s[0].p, t, i);
    if (isfinite(x))
      continue;
    unsigned long long key = (unsigned long long)a.s[4].i |
                             ((unsigned long long)(i < most ? i : most) << 1) |
                             (isnan(x) ? 0ull : 1ull);
    if (~key > best)
      best = ~key;
  }
  if (best)
    atomicMax((unsigned long long *)a.s[1].p, best);
}
)";

} // namespace

const char *opKernelOptimSource() { return kOptim; }

} // namespace kiln::runtime::cuda
