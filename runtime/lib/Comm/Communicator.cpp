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

Expected<AxisCommunicators> splitMesh(Communicator &world, int64_t pp,
                                      int64_t dpShard, int64_t tp) {
  if (pp < 1 || dpShard < 1 || tp < 1 || pp * dpShard * tp != world.size())
    return Error("the mesh pp " + std::to_string(pp) + " x dp_shard " +
                 std::to_string(dpShard) + " x tp " + std::to_string(tp) +
                 " is not the run's " + std::to_string(world.size()) +
                 " ranks");
  int rank = world.rank();
  AxisCommunicators axes;
  // An axis spanning the world is the world; one of size 1 is local. The
  // axes that need a split are split in this order on every rank: pp,
  // dp_shard, tp. Each color is the rank's coordinates on the other two
  // axes, and the key its world rank.
  auto make =
      [&](int64_t size, int64_t color,
          std::unique_ptr<Communicator> &owned) -> Expected<Communicator *> {
    if (size == world.size())
      return &world;
    if (size == 1) {
      owned = createLocalCommunicator();
    } else {
      Expected<std::unique_ptr<Communicator>> made =
          world.split(static_cast<int>(color), rank);
      if (!made)
        return made.takeError();
      owned = *std::move(made);
    }
    return owned.get();
  };
  const int64_t stage = dpShard * tp; // ranks per pp coordinate
  Expected<Communicator *> outer = make(pp, rank % stage, axes.ownedPp);
  if (!outer)
    return outer.takeError();
  axes.pp = *outer;
  Expected<Communicator *> dp =
      make(dpShard, (rank / stage) * tp + rank % tp, axes.ownedDpShard);
  if (!dp)
    return dp.takeError();
  axes.dpShard = *dp;
  Expected<Communicator *> inner = make(tp, rank / tp, axes.ownedTp);
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
