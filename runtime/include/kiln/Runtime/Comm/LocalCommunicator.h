//===- LocalCommunicator.h - The communicator of a single rank --*- C++ -*-===//
//
// World size 1, no MPI: what `kiln train` uses when not started by an MPI
// launcher. It keeps the whole contract of Communicator.h: every
// collective is done (copied, or reduced over its one contribution by the
// same rules as every backend) inside its start call, so it is complete
// before the caller computes anything and in issue order; bad arguments
// fail the communicator the same way.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_COMM_LOCALCOMMUNICATOR_H
#define KILN_RUNTIME_COMM_LOCALCOMMUNICATOR_H

#include "kiln/Runtime/Comm/Communicator.h"

namespace kiln::runtime::comm {

std::unique_ptr<Communicator> createLocalCommunicator();

} // namespace kiln::runtime::comm

#endif // KILN_RUNTIME_COMM_LOCALCOMMUNICATOR_H
