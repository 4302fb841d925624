//===- kiln-run.cpp - The runtime alone, without the compiler -------------===//
//
// Runs compiled plans on a machine that has no MLIR. Plan execution arrives
// with the plan format (issue #3); today the tool reports the devices this
// build can use.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Devices.h"

#include <cstring>
#include <iostream>

int main(int argc, char **argv) {
  if (argc == 2 && std::strcmp(argv[1], "--devices") == 0) {
    std::cout << kiln::runtime::formatDeviceReport(
        kiln::runtime::queryDevices());
    return 0;
  }
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 ||
                    std::strcmp(argv[1], "-h") == 0)) {
    std::cout << "usage: kiln-run --devices   list the devices this build "
                 "can run plans on\n"
                 "       kiln-run PLAN        run a compiled plan (not "
                 "implemented yet: issue #3)\n";
    return 0;
  }
  if (argc == 2 && argv[1][0] != '-') {
    std::cerr << "error: running plans is not implemented yet (issue #3)\n";
    return 1;
  }
  std::cerr << "error: expected --devices or a PLAN (see kiln-run --help)\n";
  return 1;
}
