//===- Devices.h - Which backends this build can run on ---------*- C++ -*-===//
//
// The runtime includes nothing from MLIR or LLVM. The CUDA backend is
// compiled whenever the toolkit exists; whether a GPU is present is found
// out at run time, and "no GPU" is an ordinary answer, never an error.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_DEVICES_H
#define KILN_RUNTIME_DEVICES_H

#include <cstddef>
#include <string>
#include <vector>

namespace kiln::runtime {

struct CudaDevice {
  int ordinal = 0;
  std::string name;
  int computeMajor = 0, computeMinor = 0;
  size_t totalMemory = 0;
};

struct DeviceReport {
  /// The CUDA backend was compiled into this build.
  bool cudaBuilt = false;
  /// Why no CUDA device is usable, when `cudaDevices` is empty.
  std::string cudaUnavailableReason;
  std::vector<CudaDevice> cudaDevices;
};

/// Probes the CUDA devices. Never fails: any CUDA error means "no GPU".
DeviceReport queryDevices();

/// The report as lines of text, for `kiln-run --devices`.
std::string formatDeviceReport(const DeviceReport &report);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_DEVICES_H
