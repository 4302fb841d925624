//===- kiln-run.cpp - The runtime alone, without the compiler -------------===//
//
//   kiln-run --devices            the devices this build can run plans on
//   kiln-run PLAN --describe      what a plan holds
//   kiln-run PLAN                 run a plan (not implemented yet: #3)
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Devices.h"
#include "kiln/Runtime/Plan.h"

#include <cstring>
#include <iomanip>
#include <iostream>
#include <map>

using namespace kiln::runtime;

namespace {
void describe(const Plan &plan) {
  auto mib = [](int64_t bytes) { return bytes / (1024.0 * 1024.0); };
  int64_t states = 0, params = 0;
  for (const PlanValue &v : plan.values)
    if (v.kind == PlanValue::State) {
      ++states;
      params += v.init.kind != InitSpec::Zeros ? v.numElements() : 0;
    }
  std::cout << std::fixed << std::setprecision(1) << "plan version "
            << plan.version << ", vocab " << plan.vocabSize << "\n"
            << "state: " << states << " tensors, " << mib(plan.stateBytes)
            << " MiB (" << params << " parameters)\n"
            << "arena: " << mib(plan.arenaBytes) << " MiB\n";
  for (const auto &[name, entry] : plan.entries) {
    std::map<std::string, int> ops;
    for (const PlanStep &step : entry.steps)
      ++ops[step.op];
    std::cout << name << ": " << entry.steps.size() << " steps, arena "
              << mib(entry.arenaBytes) << " MiB;";
    for (const auto &[op, count] : ops)
      std::cout << " " << op << " " << count;
    std::cout << "\n";
  }
}

int usage() {
  std::cerr << "error: expected --devices, PLAN or PLAN --describe (see "
               "kiln-run --help)\n";
  return 1;
}
} // namespace

int main(int argc, char **argv) {
  if (argc == 2 && !std::strcmp(argv[1], "--devices")) {
    std::cout << formatDeviceReport(queryDevices());
    return 0;
  }
  if (argc == 2 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) {
    std::cout << "usage: kiln-run --devices          list the devices this "
                 "build can run plans on\n"
                 "       kiln-run PLAN --describe    what a plan holds\n"
                 "       kiln-run PLAN               run a compiled plan (not "
                 "implemented yet: issue #3)\n";
    return 0;
  }
  if (argc < 2 || argv[1][0] == '-')
    return usage();
  std::string error;
  std::optional<Plan> plan = loadPlan(argv[1], error);
  if (!plan) {
    std::cerr << "error: " << error << "\n";
    return 1;
  }
  if (argc == 3 && !std::strcmp(argv[2], "--describe")) {
    describe(*plan);
    return 0;
  }
  if (argc != 2)
    return usage();
  std::cerr << "error: running plans is not implemented yet (issue #3)\n";
  return 1;
}
