//===- MpiCommunicatorNone.cpp - MpiCommunicator.h without MPI ------------===//
//
// Built instead of the MPI backend where CMake found no MPI, or was told
// not to use it (KILN_USE_MPI=OFF; runtime/cmake/HostDeps.cmake): KilnComm
// then has the local communicator only, which createCommunicator returns
// for every process no MPI launcher started. A process an MPI launcher did
// start gets this error rather than a world of one rank that would train
// alone beside its peers.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Comm/MpiCommunicator.h"

namespace kiln::runtime::comm {

Expected<std::unique_ptr<Communicator>> createMpiCommunicator() {
  return Error("started by an MPI launcher, but this build of Kiln has no "
               "MPI (not found, or KILN_USE_MPI=OFF, when it was "
               "configured); run it without mpirun for one rank");
}

} // namespace kiln::runtime::comm
