//===- OpKernelSource.cpp - CUDA C++ of the plan's library ops ------------===//
//
// The text NVRTC compiles once at load: a prelude (the argument block,
// dtype loads and stores, the CPU backend's exp), the layout ops, the
// embedding, RoPE, cross-entropy, the optimizer and FP8 bookkeeping ops
// (here) and attention (OpKernelAttentionSource.cpp). Each kernel mirrors
// the CPU kernel's sequence of float operations where that costs no
// parallelism, so that most results are the CPU's bits; where it would
// (sums over a long axis), the sum runs as a tree in a fixed order.
//
// Kernels are written for the host shim too (runtime/tests/Cuda/HostShim.h):
// shared memory and __syncthreads only, no warp intrinsics, and every
// thread of a block reaches every __syncthreads.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Cuda/OpKernels.h"

#include "DevicePrelude.h"

namespace kiln::runtime::cuda {

/// The attention kernels' text (OpKernelAttentionSource.cpp).
const char *opKernelAttentionSource();

namespace {

// The op kernels' own helpers, after the shared device prelude.
const char *kPrelude = R"(typedef long long kiln_i64;
union KilnSlot { void *p; kiln_i64 i; double f; };
struct KilnOpArgs { KilnSlot s[16]; };
struct KilnOpListArgs { KilnSlot s[KILN_LIST_SLOTS]; };
#ifndef KILN_DYNAMIC_SHARED
#define KILN_DYNAMIC_SHARED(T, name) extern __shared__ __align__(16) T name[]
#endif
#define KILN_NEG_INF (-__int_as_float(0x7f800000))
// Dtype codes: kiln::runtime::DType's values.
#define KILN_F32 0
#define KILN_BF16 1
#define KILN_E4M3 6
#define KILN_E5M2 7

__device__ __forceinline__ float kiln_load(const void *p, int t, kiln_i64 i) {
  switch (t) {
  case KILN_BF16:
    return kiln_from_bf16(((const kiln_u16 *)p)[i]);
  case KILN_E4M3:
    return kiln_from_e4m3(((const kiln_u8 *)p)[i]);
  case KILN_E5M2:
    return kiln_from_e5m2(((const kiln_u8 *)p)[i]);
  default:
    return ((const float *)p)[i];
  }
}
__device__ __forceinline__ void kiln_store(void *p, int t, kiln_i64 i, float x) {
  switch (t) {
  case KILN_BF16:
    ((kiln_u16 *)p)[i] = kiln_bf16_bits(x);
    break;
  case KILN_E4M3:
    ((kiln_u8 *)p)[i] = kiln_e4m3_bits(x);
    break;
  case KILN_E5M2:
    ((kiln_u8 *)p)[i] = kiln_e5m2_bits(x);
    break;
  default:
    ((float *)p)[i] = x;
  }
}
__device__ __forceinline__ int kiln_dtype_bytes(int t) {
  return t == KILN_F32 ? 4 : t == KILN_BF16 ? 2 : 1;
}
// Copies element `from` of src to element `to` of dst: the bits when the
// dtypes agree, else through f32.
__device__ __forceinline__ void kiln_move(const void *src, int st, kiln_i64 from,
                                          void *dst, int dt, kiln_i64 to) {
  if (st != dt)
    kiln_store(dst, dt, to, kiln_load(src, st, from));
  else if (st == KILN_F32)
    ((unsigned *)dst)[to] = ((const unsigned *)src)[from];
  else if (st == KILN_BF16)
    ((kiln_u16 *)dst)[to] = ((const kiln_u16 *)src)[from];
  else
    ((kiln_u8 *)dst)[to] = ((const kiln_u8 *)src)[from];
}
__device__ __forceinline__ kiln_i64 kiln_thread() {
  return (kiln_i64)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ kiln_i64 kiln_threads() {
  return (kiln_i64)gridDim.x * blockDim.x;
}
// The CPU backend's exp (runtime/lib/Cpu/FastExp.h): plain float
// operations only, so with --fmad=false it gives the CPU's bits.
__device__ __forceinline__ float kiln_select(bool c, float a, float b) {
  return c ? a : b;
}
__device__ __forceinline__ float kiln_exp(float x) {
  x = kiln_select(x < -104.0f, -104.0f, x);
  x = kiln_select(x > 89.0f, 89.0f, x);
  const float shifter = 0x1.8p23f, log2e = 0x1.715476p+0f;
  const float ln2Hi = 0x1.63p-1f, ln2Lo = -0x1.bd0106p-13f;
  float t = x * log2e + shifter;
  float n = t - shifter;
  int ni = (int)__float_as_uint(t) - (int)__float_as_uint(shifter);
  float r = (x - n * ln2Hi) - n * ln2Lo;
  const float c2 = 0x1.fffffcp-2f, c3 = 0x1.555492p-3f, c4 = 0x1.5558f2p-5f,
              c5 = 0x1.123a2p-7f, c6 = 0x1.6a23dp-10f;
  float q = c2 + r * (c3 + r * (c4 + r * (c5 + r * c6)));
  float p = 1.0f + (r + (r * r) * q);
  int n1 = ni / 2, n2 = ni - n1;
  return p * __int_as_float((n1 + 127) << 23) * __int_as_float((n2 + 127) << 23);
}
// Sum of the block's v[0, blockDim.x) in shared memory, as a tree in a
// fixed order (blockDim.x a power of two); every thread gets the result.
__device__ __forceinline__ double kiln_block_sum(double *v) {
  __syncthreads();
  for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w)
      v[threadIdx.x] += v[threadIdx.x + w];
    __syncthreads();
  }
  double total = v[0];
  __syncthreads();
  return total;
}
__device__ __forceinline__ float kiln_block_max(float *v) {
  __syncthreads();
  for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w && v[threadIdx.x + w] > v[threadIdx.x])
      v[threadIdx.x] = v[threadIdx.x + w];
    __syncthreads();
  }
  float m = v[0];
  __syncthreads();
  return m;
}
)";

// Layout ops, the embedding and RoPE.
const char *kLayout = R"(
// dst[dstOff + i] = src[srcOff + i] for i < n (reshape, flatten, unflatten,
// a dtype change, the embedding gradient's f32 accumulator to its dtype).
// 0 src, 1 src dtype, 2 dst, 3 dst dtype, 4 n, 5 srcOff, 6 dstOff.
extern "C" __global__ void kiln_copy(KilnOpArgs a) {
  int st = (int)a.s[1].i, dt = (int)a.s[3].i;
  kiln_i64 n = a.s[4].i, so = a.s[5].i, dOff = a.s[6].i;
  for (kiln_i64 i = kiln_thread(); i < n; i += kiln_threads())
    kiln_move(a.s[0].p, st, so + i, a.s[2].p, dt, dOff + i);
}

// out[o] = in[sum_d index_d(o) * stride_d]: 0 src, 1 src dtype, 2 dst,
// 3 dst dtype, 4 n, 5 rank (<= 5), 6-10 the result's dims, 11-15 the
// source's strides in the result's dimension order.
extern "C" __global__ void kiln_transpose(KilnOpArgs a) {
  int st = (int)a.s[1].i, dt = (int)a.s[3].i, rank = (int)a.s[5].i;
  kiln_i64 n = a.s[4].i;
  for (kiln_i64 o = kiln_thread(); o < n; o += kiln_threads()) {
    kiln_i64 rest = o, src = 0;
    for (int d = rank - 1; d >= 0; --d) {
      kiln_i64 dim = a.s[6 + d].i;
      src += (rest % dim) * a.s[11 + d].i;
      rest /= dim;
    }
    kiln_move(a.s[0].p, st, src, a.s[2].p, dt, o);
  }
}

// out[t, c] = table[ids[t], c]; a row of zeros for an id outside the
// table (the CPU backend refuses it). 0 table, 1 dtype, 2 ids (i32),
// 3 out, 4 dtype, 5 tokens, 6 vocab, 7 dim.
extern "C" __global__ void kiln_embedding(KilnOpArgs a) {
  const int *ids = (const int *)a.s[2].p;
  int tt = (int)a.s[1].i, ot = (int)a.s[4].i;
  kiln_i64 vocab = a.s[6].i, dim = a.s[7].i, n = a.s[5].i * dim;
  for (kiln_i64 e = kiln_thread(); e < n; e += kiln_threads()) {
    kiln_i64 t = e / dim, c = e % dim;
    int id = ids[t];
    if (id < 0 || id >= vocab)
      kiln_store(a.s[3].p, ot, e, 0.0f);
    else
      kiln_move(a.s[0].p, tt, (kiln_i64)id * dim + c, a.s[3].p, ot, e);
  }
}

// acc[ids[t], c] += dout[t, c] for every token t in order, one thread per
// column c, as the CPU kernel does: each sum has the CPU's order, and no
// two threads touch one element. 0 dout, 1 dtype, 2 ids, 3 acc (f32,
// zeroed), 4 tokens, 5 vocab, 6 dim.
extern "C" __global__ void kiln_embedding_grad(KilnOpArgs a) {
  const int *ids = (const int *)a.s[2].p;
  float *acc = (float *)a.s[3].p;
  int gt = (int)a.s[1].i;
  kiln_i64 tokens = a.s[4].i, vocab = a.s[5].i, dim = a.s[6].i;
  kiln_i64 c = kiln_thread();
  if (c >= dim)
    return;
  for (kiln_i64 t = 0; t < tokens; ++t) {
    int id = ids[t];
    if (id >= 0 && id < vocab)
      acc[(kiln_i64)id * dim + c] += kiln_load(a.s[0].p, gt, t * dim + c);
  }
}

// The cos and sin of s * theta^(-2i/dim) for s < seq, i < dim/2, in
// double, rounded to float: cos at table[s * half + i], sin half * seq
// further. 0 table, 1 seq, 2 dim, 3 theta.
extern "C" __global__ void kiln_rope_table(KilnOpArgs a) {
  float *table = (float *)a.s[0].p;
  kiln_i64 seq = a.s[1].i, dim = a.s[2].i, half = dim / 2;
  double theta = a.s[3].f;
  for (kiln_i64 e = kiln_thread(); e < seq * half; e += kiln_threads()) {
    kiln_i64 s = e / half, i = e % half;
    double freq = pow(theta, -2.0 * (double)i / (double)dim);
    double angle = (double)s * freq;
    table[e] = (float)cos(angle);
    table[seq * half + e] = (float)sin(angle);
  }
}

// Rotate-half RoPE over [batch, seq, heads, dim] (sign -1: its backward).
// 0 x, 1 dtype, 2 y, 3 dtype, 4 table, 5 batch * seq, 6 seq, 7 heads,
// 8 dim, 9 sign.
extern "C" __global__ void kiln_rope(KilnOpArgs a) {
  const float *table = (const float *)a.s[4].p;
  int xt = (int)a.s[1].i, yt = (int)a.s[3].i;
  kiln_i64 seq = a.s[6].i, heads = a.s[7].i, dim = a.s[8].i, half = dim / 2;
  kiln_i64 n = a.s[5].i * heads * half;
  float sign = (float)a.s[9].f;
  for (kiln_i64 e = kiln_thread(); e < n; e += kiln_threads()) {
    kiln_i64 i = e % half, rowHead = e / half, row = rowHead / heads;
    kiln_i64 s = row % seq, base = rowHead * dim;
    float c = table[s * half + i], si = sign * table[seq * half + s * half + i];
    float lo = kiln_load(a.s[0].p, xt, base + i);
    float hi = kiln_load(a.s[0].p, xt, base + i + half);
    kiln_store(a.s[2].p, yt, base + i, lo * c - hi * si);
    kiln_store(a.s[2].p, yt, base + i + half, hi * c + lo * si);
  }
}
)";

// Cross-entropy: one block per row.
const char *kLoss = R"(
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

/// The optimizer and FP8 kernels' text (OpKernelOptimSource.cpp).
const char *opKernelOptimSource();

const std::string &opKernelLibrarySource() {
  static const std::string source =
      "#define KILN_LIST_SLOTS " + std::to_string(kMaxOpKernelListArgs) +
      "\n" + devicePrelude() + kPrelude + kLayout + kLoss +
                                    opKernelOptimSource() +
                                    opKernelAttentionSource();
  return source;
}

} // namespace kiln::runtime::cuda
