//===- Communicator.cpp - Names, and the backend the launcher asks for ----===//
//
// An MPI launcher announces itself in the environment of every rank it
// starts: Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE, PMI and PMIx
// launchers (MPICH's Hydra, Slurm's srun) set PMI_SIZE or PMIX_RANK. With
// none of them this is a single-process run and needs no MPI at all.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Comm/Communicator.h"
#include "kiln/Runtime/Comm/LocalCommunicator.h"
#include "kiln/Runtime/Comm/MpiCommunicator.h"

#include <cstdio>
#include <cstdlib>

namespace kiln::runtime::comm {

Communicator::~Communicator() = default;

void Communicator::abortRun(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);
}

int64_t elementBytes(ElementType type) {
  switch (type) {
  case ElementType::BF16:
    return 2;
  case ElementType::U8:
    return 1;
  default:
    return 4;
  }
}

const char *elementTypeName(ElementType type) {
  switch (type) {
  case ElementType::F32:
    return "f32";
  case ElementType::BF16:
    return "bf16";
  case ElementType::U8:
    return "u8";
  }
  return "unknown-type";
}

const char *reduceOpName(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum:
    return "sum";
  case ReduceOp::Max:
    return "max";
  }
  return "unknown-op";
}

bool launchedByMpi() {
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    const char *value = std::getenv(name);
    if (value && *value)
      return true;
  }
  return false;
}

Expected<std::unique_ptr<Communicator>> createCommunicator() {
  if (launchedByMpi())
    return createMpiCommunicator();
  return createLocalCommunicator();
}

} // namespace kiln::runtime::comm
