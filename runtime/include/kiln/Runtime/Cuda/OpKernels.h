//===- OpKernels.h - CUDA kernels for the plan's library ops ----*- C++ -*-===//
//
// The CUDA backend runs every library op of the plan that is not a GEMM, a
// collective or a fused group (embedding, RoPE, attention, cross-entropy,
// AdamW, the layout ops, the FP8 bookkeeping ops, ...) with kernels from one
// CUDA C++ translation unit, opKernelLibrarySource(), that NVRTC compiles
// once at load (KernelCompiler.h). Generating the source and the launches
// needs no CUDA: the host check (runtime/tests/Cuda/OpKernelCheck.cpp) runs
// the very launches below against a shim of the CUDA built-ins and compares
// them with the CPU backend's ops (CpuOps.h).
//
// Kernel ABI: every op kernel is `extern "C" __global__ void NAME(KilnOpArgs
// a)`, where KilnOpArgs (defined in the source) holds kMaxOpKernelArgs
// 8-byte slots: a device pointer, a signed 64-bit integer or a double, in
// the order of OpKernelLaunch::args. So the executor launches any kernel
// with one parameter, the slots packed back to back. The one exception is
// kiln_adamw_list, whose KilnOpListArgs has kMaxOpKernelListArgs slots
// (OpKernelLaunch::slots says which).
//
// Semantics: each op reads its operands in their plan dtypes (f32, bf16,
// FP8 codes, i32/i64 indices), computes in f32 (or wider where the CPU
// kernel does) and rounds each result once to its dtype, as the CPU backend
// does after widening. docs/cuda-op-kernels.md states, per op, the kernel
// design and whether the result is the CPU's bits or within what tolerance.
//
// Dynamic shared memory is declared through the source's
// KILN_DYNAMIC_SHARED(T, name) macro (extern __shared__ under NVRTC), which
// the host shim replaces; no kernel uses warp intrinsics.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_OPKERNELS_H
#define KILN_RUNTIME_CUDA_OPKERNELS_H

#include "kiln/Runtime/Plan.h"
#include "kiln/Runtime/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::runtime::cuda {

constexpr int kMaxOpKernelArgs = 16;
/// Parameters one kiln_adamw_list launch updates, and the slots of its
/// parameter (KilnOpListArgs): the step's scalars, the count, and six per
/// parameter; 3856 bytes, inside the 4 KiB every CUDA version takes.
constexpr int kMaxAdamWListTensors = 80;
constexpr int kMaxOpKernelListArgs = 2 + 6 * kMaxAdamWListTensors;

/// Where one 8-byte kernel argument comes from at launch.
struct OpKernelArg {
  enum Kind {
    Operand, // device address of the step's operand `index`
    Result,  // device address of the step's result `index`
    Scratch, // device scratch of the step + `index` bytes (256-aligned base)
    Int,     // the integer `i`
    Float,   // the double `f`
  } kind = Int;
  int64_t index = 0;
  int64_t i = 0;
  double f = 0;
  /// Operand and Result: which of the launch plan's steps (a plan made for
  /// several steps, adamwListLaunchPlan; 0 otherwise).
  int32_t step = 0;
};

/// One launch: a 1-D grid of `grid` blocks of `block` threads.
struct OpKernelLaunch {
  std::string kernel; // an extern "C" name of opKernelLibrarySource()
  int64_t grid = 1;
  int block = 128;
  int sharedBytes = 0; // dynamic shared memory
  std::vector<OpKernelArg> args;
  /// Slots of the kernel's parameter: kMaxOpKernelArgs (KilnOpArgs), or
  /// kMaxOpKernelListArgs for kiln_adamw_list (KilnOpListArgs).
  int slots = kMaxOpKernelArgs;
};

/// How one library step runs: the results listed in `zeroResults` are set
/// to zero bytes, `scratchBytes` of scratch are zeroed, then the launches run
/// in order on one stream. The executor owns the scratch (it may reuse it
/// between steps).
struct OpLaunchPlan {
  std::vector<int> zeroResults;
  int64_t scratchBytes = 0;
  std::vector<OpKernelLaunch> launches;
};

/// The CUDA C++ of every op kernel: one translation unit for NVRTC (it
/// includes only <cuda_fp8.h>, as the group kernels do).
const std::string &opKernelLibrarySource();

/// Whether the CUDA backend runs `op` through opLaunchPlan: a switch over
/// every plan::Op with no default, so that -Wswitch names a new op.
bool isKernelOp(plan::Op op);

/// The launches of a library step of `plan` whose op isKernelOp, or why
/// not: a shape or dtype the kernels do not take.
/// `rank` is the executor's rank index: shard_amax and shard_quantize read
/// the part of each weight inside elements [rank * n, (rank + 1) * n) of
/// the flat buffer (n: the shard's elements); other ops ignore it. The
/// launches of those two ops differ per rank, the others' do not.
Expected<OpLaunchPlan> opLaunchPlan(const Plan &plan, const PlanStep &step,
                                    int rank = 0);

/// Whether adamw step `next` can run in one launch with adamw step `first`:
/// the same gradient norm, learning rate and step count, the same
/// attributes, and both update their parameter and moments in place.
bool adamwJoins(const Plan &plan, const PlanStep &first,
                const PlanStep &next);

/// AdamW over the parameters of several adamw steps at once (steps that
/// adamwJoins the first): one launch computes the step's scalars, then one
/// kiln_adamw_list launch per `perLaunch` parameters (at most
/// kMaxAdamWListTensors) updates them, each element as kiln_adamw does.
/// Operand and Result arguments name a step by its index in `steps`.
Expected<OpLaunchPlan>
adamwListLaunchPlan(const Plan &plan,
                    const std::vector<const PlanStep *> &steps,
                    int perLaunch = kMaxAdamWListTensors);

/// The division of a collective's sum by the rank count (reduction "mean"):
/// result 0 (`n` elements of `dtype`, f32 or bf16) becomes, in place,
/// round(x / divisor) in f32, then rounded to the dtype, as the CPU
/// executor does.
OpLaunchPlan meanDivideLaunch(DType dtype, int64_t n, int64_t divisor);

/// The per-op numerics check of the CUDA backend (the CPU backend's
/// setCheckNumerics): a launch that looks at result `result` (`n` elements
/// of `dtype`) of plan step `step` and merges its first non-finite value
/// into a 64-bit flag, zero before the run. Operand 0 is the tensor,
/// operand 1 the flag. Nothing for a step index past 2^20, a result index
/// past 63 or an integer dtype.
std::optional<OpKernelLaunch> nonFiniteCheckLaunch(DType dtype, int64_t n,
                                                   int64_t step, int result);

/// What a flag holds after a run: the earliest step, result and element
/// (elements past 2^37 - 1 read as that) with a non-finite value.
struct NonFinite {
  int64_t step = 0;
  int result = 0;
  int64_t element = 0;
  bool nan = false;
  /// "NaN in its result 0 at element 12", as the CPU backend says it.
  std::string describe() const;
};
/// Nothing when the flag is zero (every checked value finite).
std::optional<NonFinite> decodeNonFinite(uint64_t flag);

} // namespace kiln::runtime::cuda

#endif // KILN_RUNTIME_CUDA_OPKERNELS_H
