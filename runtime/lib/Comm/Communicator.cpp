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

Expected<std::unique_ptr<Communicator>> Communicator::split(int, int) {
  return Error(std::string(backendName()) +
               ": this communicator cannot be split into sub-communicators");
}

Expected<AxisCommunicators> splitMesh(Communicator &world, int64_t dpShard,
                                      int64_t tp) {
  if (dpShard < 1 || tp < 1 || dpShard * tp != world.size())
    return Error("the mesh dp_shard " + std::to_string(dpShard) + " x tp " +
                 std::to_string(tp) + " is not the run's " +
                 std::to_string(world.size()) + " ranks");
  int rank = world.rank();
  AxisCommunicators axes;
  // An axis spanning the world is the world; one of size 1 is local. When
  // both axes are real, the splits are made in this order on every rank.
  auto make =
      [&](int64_t size, int color,
          std::unique_ptr<Communicator> &owned) -> Expected<Communicator *> {
    if (size == world.size())
      return &world;
    if (size == 1) {
      owned = createLocalCommunicator();
    } else {
      Expected<std::unique_ptr<Communicator>> made = world.split(color, rank);
      if (!made)
        return made.takeError();
      owned = *std::move(made);
    }
    return owned.get();
  };
  Expected<Communicator *> dp =
      make(dpShard, static_cast<int>(rank % tp), axes.ownedDpShard);
  if (!dp)
    return dp.takeError();
  axes.dpShard = *dp;
  Expected<Communicator *> inner =
      make(tp, static_cast<int>(rank / tp), axes.ownedTp);
  if (!inner)
    return inner.takeError();
  axes.tp = *inner;
  return axes;
}

Expected<std::unique_ptr<Communicator>> createCommunicator() {
  if (launchedByMpi())
    return createMpiCommunicator();
  return createLocalCommunicator();
}

} // namespace kiln::runtime::comm
