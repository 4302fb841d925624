// The device probe answers on any machine: with no GPU (or no CUDA in the
// build) it says why, and it never reports a device it could not read.
#include "kiln/Runtime/Devices.h"

#include <gtest/gtest.h>

using namespace kiln::runtime;

TEST(Devices, ProbeGivesDevicesOrAReason) {
  DeviceReport report = queryDevices();
#ifdef KILN_TEST_EXPECT_CUDA
  EXPECT_TRUE(report.cudaBuilt);
#endif
  if (report.cudaDevices.empty()) {
    EXPECT_FALSE(report.cudaUnavailableReason.empty());
  } else {
    for (const CudaDevice &d : report.cudaDevices) {
      EXPECT_FALSE(d.name.empty());
      EXPECT_GE(d.computeMajor, 1);
      EXPECT_GT(d.totalMemory, 0u);
    }
  }
  std::string text = formatDeviceReport(report);
  EXPECT_NE(text.find("cpu: available"), std::string::npos);
  EXPECT_NE(text.find("cuda"), std::string::npos);
}
