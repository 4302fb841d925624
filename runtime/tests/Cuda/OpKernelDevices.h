//===- OpKernelDevices.h - Where kiln-op-kernel-check launches --*- C++ -*-===//
//
// The op kernel check (OpKernelCheck.cpp) runs a step's launches as the
// CUDA executor does (the listed results and the scratch zeroed, each
// argument slot resolved, the launches in order) on one of two devices:
// the host, through the shim of HostShim.h, or GPU 0, the library compiled
// by NVRTC and launched with cudart.
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

} // namespace kiln::runtime::opcheck

#endif // KILN_RUNTIME_TESTS_CUDA_OPKERNELDEVICES_H
