//===- Library.cpp - The op kernel library: its text and its dispatch -----===//
//
// The text NVRTC compiles once at load: the device prelude
// (DevicePrelude.h), the op kernels' helpers (the argument block, dtype
// loads and stores, the CPU backend's exp, block sums; here), then each op
// family's kernels (one file each in this folder). Each kernel mirrors
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

#include "../DevicePrelude.h"
#include "Families.h"

namespace kiln::runtime::cuda {

// The kernels take DType's values as their dtype codes (KILN_F32, ...).
static_assert(static_cast<int>(DType::F32) == 0 &&
              static_cast<int>(DType::BF16) == 1 &&
              static_cast<int>(DType::I32) == 4 &&
              static_cast<int>(DType::F8E4M3) == 6 &&
              static_cast<int>(DType::F8E5M2) == 7);

namespace {

// The op kernels' own helpers, after the shared device prelude.
const char *kOpHelpers = R"(typedef long long kiln_i64;
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
#define KILN_I32 4
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
  else if (st == KILN_F32 || st == KILN_I32)
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

} // namespace

const std::string &opKernelLibrarySource() {
  using namespace kernels;
  static const std::string source =
      "#define KILN_LIST_SLOTS " + std::to_string(kMaxOpKernelListArgs) +
      "\n" + devicePrelude() + kOpHelpers + layoutSource() + embeddingSource() +
      ropeSource() + lossSource() + optimSource() + fp8Source() +
      meanDivideSource() + checkFiniteSource() + attentionSource();
  return source;
}

bool isKernelOp(plan::Op op) {
  using plan::Op;
  switch (op) {
  case Op::Embedding:
  case Op::EmbeddingGrad:
  case Op::Rope:
  case Op::RopeGrad:
  case Op::Attention:
  case Op::AttentionGrad:
  case Op::CrossEntropy:
  case Op::CrossEntropyGrad:
  // Loss parallel's (Loss.cpp): checked on the host against the CPU
  // backend (tests/Cuda/loss-parallel-host.test), never run on a GPU.
  case Op::IndexToFloat:
  case Op::VocabParallelMax:
  case Op::VocabParallelStats:
  case Op::VocabParallelStatsGrad:
  case Op::VocabParallelLoss:
  case Op::VocabParallelLossGrad:
  case Op::Reshape:
  case Op::Transpose:
  case Op::Flatten:
  case Op::Unflatten:
  case Op::DelayedAmax:
  case Op::AmaxHistoryUpdate:
  case Op::GradNorm:
  case Op::LrSchedule:
  case Op::AdamW:
  case Op::ShardAmax:
  case Op::ShardQuantize:
    return true;
  // cuBLASLt runs the GEMMs, NCCL the collectives; init runs at load, fused
  // groups are generated kernels, and group-only ops never stand alone.
  case Op::Init:
  case Op::Linear:
  case Op::LinearGradInput:
  case Op::LinearGradWeight:
  case Op::ScaledMatmul:
  case Op::AllGatherStart:
  case Op::ReduceScatterStart:
  case Op::AllReduceStart:
  case Op::SendRecvStart:
  case Op::Wait:
  case Op::Fused:
  case Op::Add:
  case Op::Mul:
  case Op::Silu:
  case Op::SiluGrad:
  case Op::Sqrt:
  case Op::Cast:
  case Op::RmsNorm:
  case Op::RmsNormGrad:
  case Op::Amax:
  case Op::Quantize:
    return false;
  }
  return false;
}

Expected<OpLaunchPlan> opLaunchPlan(const Plan &plan, const PlanStep &step,
                                    int rank) {
  using namespace kernels;
  StepReader r(plan, step);
  Step s{plan, step};
  switch (step.kind) {
  case plan::Op::Embedding:
    return embedding(r);
  case plan::Op::EmbeddingGrad:
    return embeddingGrad(r);
  case plan::Op::Rope:
    return rope(r, 1.0f);
  case plan::Op::RopeGrad:
    return rope(r, -1.0f);
  case plan::Op::Attention:
    return attention(r);
  case plan::Op::AttentionGrad:
    return attentionGrad(r);
  case plan::Op::Reshape:
    return copyLike(r, 0);
  case plan::Op::Unflatten:
    return copyLike(r, step.i64("offset"));
  case plan::Op::Flatten:
    return flatten(r);
  case plan::Op::Transpose:
    return transpose(r);
  case plan::Op::CrossEntropy:
    return crossEntropy(s, false);
  case plan::Op::CrossEntropyGrad:
    return crossEntropy(s, true);
  case plan::Op::IndexToFloat:
    return indexToFloat(s);
  case plan::Op::VocabParallelMax:
  case plan::Op::VocabParallelStats:
  case plan::Op::VocabParallelStatsGrad:
  case plan::Op::VocabParallelLoss:
  case plan::Op::VocabParallelLossGrad:
    return vocabParallel(s);
  case plan::Op::GradNorm:
    return gradNorm(s);
  case plan::Op::LrSchedule:
    return lrSchedule(s);
  case plan::Op::AdamW:
    return adamw(s);
  case plan::Op::DelayedAmax:
    return delayedAmax(s);
  case plan::Op::AmaxHistoryUpdate:
    return amaxHistoryUpdate(s);
  case plan::Op::ShardAmax:
  case plan::Op::ShardQuantize:
    return shardOp(s, rank);
  default:
    break;
  }
  return Error("the CUDA op kernels do not run '" + step.op + "'");
}

} // namespace kiln::runtime::cuda
