//===- NcclCommunicator.h - Collectives over NCCL (GPU) ---------*- C++ -*-===//
//
// The NCCL backend of Communicator.h: one rank per GPU, buffers in device
// memory. It is bootstrapped over a host communicator (MPI under mpirun or
// srun, local at world size 1): rank 0 makes the NCCL unique id and every
// rank gets it through the host communicator's all-gather, so nodes are
// spanned exactly as MPI spans them. The host communicator stays available
// (host()) for what moves host memory (checkpoint gathers).
//
// Each collective is enqueued on the communicator's own stream after the
// work queued so far on the producer stream (setProducerStream; an event
// joins the two), and an event recorded after it completes its handle:
// test() queries the event, wait() blocks on it, streamWait() makes another
// stream wait for it on the device without blocking the host (what the
// CUDA backend uses, and what CUDA graph capture needs).
//
// A watchdog thread watches the collectives in flight: when one has not
// completed after `watchdogSeconds`, or NCCL reports an asynchronous error
// (a peer died, a network failure), it calls ncclCommAbort, prints one
// line naming the collective and the rank, and exits the process with
// code 1, so the launcher takes the other ranks down instead of hanging.
//
// NCCL refuses two ranks on one GPU; docs/cuda.md says which multi-GPU
// paths have not run.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_COMM_NCCLCOMMUNICATOR_H
#define KILN_RUNTIME_COMM_NCCLCOMMUNICATOR_H

#include "kiln/Runtime/Comm/Communicator.h"

typedef struct CUstream_st *cudaStream_t;

namespace kiln::runtime::comm {

class NcclCommunicator : public Communicator {
public:
  /// The GPU this rank uses: its local rank on the node (from the
  /// launcher's environment: OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID,
  /// MPI_LOCALRANKID, else the host rank) modulo the visible devices.
  virtual int device() const = 0;
  /// The bootstrap communicator (host memory).
  virtual Communicator &host() = 0;
  /// Later collectives start after the work queued on `stream` by then
  /// (null: the legacy default stream).
  virtual void setProducerStream(cudaStream_t stream) = 0;
  /// Makes `stream` wait on the device for collective `h` (and every one
  /// issued before it). Empty on success, else an error line.
  virtual std::string streamWait(CommHandle h, cudaStream_t stream) = 0;
  /// The communicator's own stream (for tests and traces).
  virtual cudaStream_t stream() const = 0;
};

/// Sets the device (cudaSetDevice) and creates the NCCL communicator of the
/// ranks of `bootstrap`, which it takes over. Null with a one-line `error`
/// when there is no usable GPU or NCCL fails.
std::unique_ptr<NcclCommunicator>
createNcclCommunicator(std::unique_ptr<Communicator> bootstrap,
                       double watchdogSeconds, std::string &error);

} // namespace kiln::runtime::comm

#endif // KILN_RUNTIME_COMM_NCCLCOMMUNICATOR_H
