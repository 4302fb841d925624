//===- CudaDevices.cpp - Probing CUDA devices through cudart --------------===//
//
// cudart (shared) loads the driver, libcuda, itself at first use; on a
// machine without a driver or a GPU every call returns an error, which is
// reported as the reason no device is available.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Devices.h"

#include <cuda_runtime_api.h>

namespace kiln::runtime {

void probeCudaDevices(DeviceReport &report) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    report.cudaUnavailableReason = cudaGetErrorString(err);
    return;
  }
  if (count == 0) {
    report.cudaUnavailableReason = "no CUDA device";
    return;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess)
      continue;
    report.cudaDevices.push_back(
        {i, prop.name, prop.major, prop.minor, prop.totalGlobalMem});
  }
  if (report.cudaDevices.empty())
    report.cudaUnavailableReason = "device properties could not be read";
}

} // namespace kiln::runtime
