//===- Launch.h - Building the op kernels' launches -------------*- C++ -*-===//
//
// Internal to runtime/lib/Cuda/Kernels: what every family's launch code
// uses to turn a plan step into OpKernelLaunches. Shapes and dtypes are
// checked there, once per step, so that a kernel never meets a layout it
// does not handle: an unsupported one is an error line, never a bad launch.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_KERNELS_LAUNCH_H
#define KILN_RUNTIME_CUDA_KERNELS_LAUNCH_H

#include "kiln/Runtime/Cuda/OpKernels.h"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

namespace kiln::runtime::cuda::kernels {

using Arg = OpKernelArg;
using Result = Expected<OpLaunchPlan>;

// One-line constructors of the argument slots (OpKernels.h).
inline Arg operand(int64_t i) { return {Arg::Operand, i, 0, 0}; }
inline Arg result(int64_t i) { return {Arg::Result, i, 0, 0}; }
inline Arg scratch(int64_t offset) { return {Arg::Scratch, offset, 0, 0}; }
inline Arg integer(int64_t v) { return {Arg::Int, 0, v, 0}; }
inline Arg real(double v) { return {Arg::Float, 0, 0, v}; }
/// A dtype as the kernels' dtype code (DType's own value).
inline Arg code(DType t) { return integer(static_cast<int>(t)); }

/// The shared memory of one block, at most: the default without opting in.
inline constexpr int64_t kMaxSharedBytes = 48 * 1024;

inline int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// A grid-stride kernel over n items: blocks of 256, at most `most` of them.
inline OpKernelLaunch gridStride(const std::string &kernel, int64_t n,
                                 int64_t most, std::vector<Arg> args) {
  return {kernel, std::clamp<int64_t>(ceilDiv(n, 256), 1, most), 256, 0,
          std::move(args)};
}

/// gridStride with at most 4096 blocks.
inline OpKernelLaunch elementwise(const std::string &kernel, int64_t n,
                                  std::vector<Arg> args) {
  return gridStride(kernel, n, 4096, std::move(args));
}

/// A kernel run by one thread (a step's scalars).
inline OpKernelLaunch oneThread(const std::string &kernel,
                                std::vector<Arg> args) {
  return {kernel, 1, 1, 0, std::move(args)};
}

/// The dtypes the kernels load and store as floats (f32, bf16, FP8).
inline bool isFloat(DType t) {
  return t == DType::F32 || t == DType::BF16 || isFp8(t);
}

/// Reads one step's values and says what is wrong with them: a check that
/// fails keeps the error, for the launch code to return (takeError).
class StepReader {
public:
  StepReader(const Plan &plan, const PlanStep &step) : plan(plan), step(step) {}

  const PlanValue &in(size_t i) const {
    return plan.values[step.operands[i]];
  }
  const PlanValue &out(size_t i) const {
    return plan.values[step.results[i]];
  }

  /// False (with the error) unless the step has these counts.
  bool counts(size_t operands, size_t results, size_t maxOperands = 0) {
    size_t most = std::max(operands, maxOperands);
    if (step.operands.size() >= operands && step.operands.size() <= most &&
        step.results.size() == results)
      return true;
    return fail("has " + std::to_string(step.operands.size()) +
                " operands and " + std::to_string(step.results.size()) +
                " results");
  }
  /// False unless every operand and result listed is a float dtype the
  /// kernels read (f32, bf16, FP8).
  bool floats(std::initializer_list<int> operands,
              std::initializer_list<int> results) {
    for (int i : operands)
      if (!isFloat(in(i).dtype))
        return fail(std::string("operand ") + std::to_string(i) + " is " +
                    dtypeName(in(i).dtype));
    for (int i : results)
      if (!isFloat(out(i).dtype))
        return fail(std::string("result ") + std::to_string(i) + " is " +
                    dtypeName(out(i).dtype));
    return true;
  }
  bool is(const PlanValue &v, DType t, const char *what) {
    return v.dtype == t ||
           fail(std::string(what) + " is " + dtypeName(v.dtype) + ", not " +
                dtypeName(t));
  }
  bool fail(const std::string &why) {
    error = Error(step.op + ": " + why);
    return false;
  }
  /// The error of the check that failed.
  Error takeError() { return std::move(error); }

  const Plan &plan;
  const PlanStep &step;
  Error error;
};

/// The same reading for the loss, optimizer and FP8 launches, whose
/// checks are stated as counts plus the values that must be f32.
struct Step {
  const Plan &plan;
  const PlanStep &step;
  const PlanValue &in(size_t i) const { return plan.values[step.operands[i]]; }
  const PlanValue &out(size_t i) const { return plan.values[step.results[i]]; }
  Error fail(const std::string &why) const {
    return Error(step.op + ": " + why);
  }
  /// Empty when the counts are these and the listed values are f32.
  Error shaped(size_t operands, size_t results, size_t maxOperands,
               std::initializer_list<int> f32Operands,
               std::initializer_list<int> f32Results) const {
    size_t n = step.operands.size();
    if (n < operands || n > std::max(operands, maxOperands) ||
        step.results.size() != results)
      return fail("has " + std::to_string(n) + " operands and " +
                  std::to_string(step.results.size()) + " results");
    for (int i : f32Operands)
      if (in(i).dtype != DType::F32)
        return fail("operand " + std::to_string(i) + " is " +
                    dtypeName(in(i).dtype) + ", not f32");
    for (int i : f32Results)
      if (out(i).dtype != DType::F32)
        return fail("result " + std::to_string(i) + " is " +
                    dtypeName(out(i).dtype) + ", not f32");
    return Error::success();
  }
};

} // namespace kiln::runtime::cuda::kernels

#endif // KILN_RUNTIME_CUDA_KERNELS_LAUNCH_H
