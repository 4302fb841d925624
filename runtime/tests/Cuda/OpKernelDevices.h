//===- OpKernelDevices.h - Where kiln-op-kernel-check launches --*- C++ -*-===//
//
// The op kernel check (OpKernelCheck.cpp) runs a step's launches as the
// CUDA executor does (the listed results and the scratch zeroed, each
// argument slot resolved, the launches in order) on one of two devices:
// the host, through the shim of HostShim.h, or GPU 0, the library compiled
// by NVRTC and launched with cudart. On GPU 0 attention also runs through
// cuDNN's fused SDPA (OpKernelCudnn.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TESTS_CUDA_OPKERNELDEVICES_H
#define KILN_RUNTIME_TESTS_CUDA_OPKERNELDEVICES_H

#include "kiln/Runtime/Cuda/OpKernels.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::runtime::opcheck {

/// The buffers of a launch plan's steps as the executor sees them: each
/// operand and result of step k is one of `storage` (a result in place of
/// its operand, or a value several steps read, shares it).
struct Buffers {
  std::vector<std::vector<uint8_t>> storage;
  std::vector<std::vector<int>> operands, results; // per step
};

/// Runs a step's launches on buffers, as the CUDA executor will.
class Device {
public:
  virtual ~Device() = default;
  virtual bool onGpu() const = 0;
  virtual Error run(const cuda::OpLaunchPlan &p, Buffers &b) = 0;
};

/// The op kernel library built for the host in folder `dir`, or why the
/// host compiler or dlopen failed.
Expected<std::unique_ptr<Device>> openHostDevice(const std::string &dir);

/// GPU 0 running the library compiled by NVRTC, or why not, with `skip`
/// set when there is no usable GPU (or no CUDA in this build).
Expected<std::unique_ptr<Device>> openGpuDevice(bool &skip);

/// Runs attention or attention_grad step `step` on GPU 0 through cuDNN's
/// fused SDPA as the CUDA executor does (CudnnAttention.h), its operands
/// `in` (in the plan's dtypes), its results into `out`. Empty on success,
/// else why not, with `refused` set where the executor would run the
/// hand-written kernels instead (no cuDNN in the build or on the machine,
/// a step sdpaConfig does not map, a graph cuDNN does not build).
std::string runCudnnAttention(const Plan &plan, const PlanStep &step,
                              const std::vector<std::vector<uint8_t>> &in,
                              std::vector<std::vector<uint8_t>> &out,
                              bool &refused);

/// A plan with an attention step and its attention_grad (entry
/// "attention"), all bf16 but lse, scale 1/sqrt(dim): shapes the preset
/// plans lack, for the cuDNN path.
Plan cudnnAttentionPlan(int64_t batch, int64_t seq, int64_t heads,
                        int64_t kvHeads, int64_t dim, bool causal);

} // namespace kiln::runtime::opcheck

#endif // KILN_RUNTIME_TESTS_CUDA_OPKERNELDEVICES_H
