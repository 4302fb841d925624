//===- MpiCommunicator.h - Collectives over MPI (CPU) -----------*- C++ -*-===//
//
// The MPI backend of Communicator.h, for ranks started by an MPI launcher
// (`mpirun -np N kiln train MODEL`); rank and size are those of
// MPI_COMM_WORLD. This header includes no MPI header.
//
// Open MPI moves data only while some thread is inside an MPI call, so a
// collective started by a caller who then computes would not progress. The
// backend therefore owns one communication thread that makes every MPI
// call of the process's communicator, MPI_Init_thread and MPI_Finalize
// included: start* queues a request and returns, the thread runs the
// requests in issue order (non-blocking MPI calls, polled), and wait()
// sleeps on a condition variable until the thread marks the request done.
// Because all MPI calls come from that one thread, which is also the one
// that initialised MPI, the backend is correct at MPI_THREAD_FUNNELED; it
// asks for MPI_THREAD_MULTIPLE (so that other code may use MPI too) and
// accepts FUNNELED or SERIALIZED; KILN_MPI_THREAD_LEVEL=funneled (or
// serialized) asks for that level instead, which the tests use to show it
// is enough. docs/communicator.md gives the design.
//
// MPI can be initialised once per process: at most one MPI communicator
// exists at a time, its destruction (which first completes every issued
// collective) finalises MPI, and none can be created afterwards. If MPI was
// already initialised by someone else, the backend needs
// MPI_THREAD_MULTIPLE and leaves finalising to them.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_COMM_MPICOMMUNICATOR_H
#define KILN_RUNTIME_COMM_MPICOMMUNICATOR_H

#include "kiln/Runtime/Comm/Communicator.h"

namespace kiln::runtime::comm {

/// Initialises MPI (on the communication thread) and returns the
/// communicator of MPI_COMM_WORLD, or a one-line error. Note that Open MPI
/// itself aborts the process when MPI_Init fails.
Expected<std::unique_ptr<Communicator>> createMpiCommunicator();

} // namespace kiln::runtime::comm

#endif // KILN_RUNTIME_COMM_MPICOMMUNICATOR_H
