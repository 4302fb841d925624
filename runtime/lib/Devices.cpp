//===- Devices.cpp - Which backends this build can run on -----------------===//

#include "kiln/Runtime/Devices.h"

#include <sstream>

namespace kiln::runtime {

#ifdef KILN_HAVE_CUDA
// In lib/Cuda/CudaDevices.cpp, compiled only with the CUDA toolkit.
void probeCudaDevices(DeviceReport &report);
#endif

DeviceReport queryDevices() {
  DeviceReport report;
#ifdef KILN_HAVE_CUDA
  report.cudaBuilt = true;
  probeCudaDevices(report);
#else
  report.cudaUnavailableReason = "this build has no CUDA backend";
#endif
  return report;
}

std::string formatDeviceReport(const DeviceReport &report) {
  std::ostringstream out;
  out << "cpu: available\n";
  if (report.cudaDevices.empty()) {
    out << "cuda: unavailable (" << report.cudaUnavailableReason << ")\n";
    return out.str();
  }
  for (const CudaDevice &d : report.cudaDevices)
    out << "cuda:" << d.ordinal << ": " << d.name << ", sm_" << d.computeMajor
        << d.computeMinor << ", " << (d.totalMemory >> 20) << " MiB\n";
  return out.str();
}

} // namespace kiln::runtime
