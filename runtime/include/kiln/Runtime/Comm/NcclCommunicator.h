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
// test() queries the event, wait() polls it, streamWait() makes another
// stream wait for it on the device without blocking the host (what the
// CUDA backend uses, and what CUDA graph capture needs).
//
// Reductions are NCCL's own (exactRingOrderReduction() is false): an
// all-reduce gives every rank the same bits, but the order of the sum is
// NCCL's (ring, tree or NVLS, chosen by size and topology), bf16 is added
// in bf16 (every partial sum rounded), and max drops NaN (fmaxf) and may
// return either zero for +0 against -0. docs/communicator.md ("NCCL
// backend") has the details and their sources.
//
// CUDA graph capture. While the producer stream is being captured, the
// start calls and streamWait() are captured too (the communicator's stream
// joins the capture through the producer's event); the collectives run
// when the graph is launched, and every rank must launch the same graphs
// in the same order. During a capture test() and wait() never touch an
// event (that would invalidate the capture): a collective issued in the
// capture tests complete and waits with an error line (it is not the
// communicator's failure), and an earlier one tests incomplete and waits
// with an error line unless already seen complete. Before ending the
// capture, streamWait() the last collective on the capturing stream, so
// the communicator's stream is joined back. barrier() is not for capture.
//
// A watchdog thread watches the collectives in flight: when the oldest has
// not completed `watchdogSeconds` after it became the oldest (so the time
// includes the producer's work queued before it), or NCCL reports an
// asynchronous error (a peer died, a network failure), it prints one line
// ("error: NCCL: all-reduce #7 (...) on rank R: ..."), calls
// ncclCommAbort and exits the process with code 1 (_exit), so the
// launcher takes the other ranks down instead of hanging. Collectives
// inside a graph are not seen one by one (their events are not recorded
// when the graph runs): the caller hands each replay to watchReplay(), and
// the watchdog times the whole replay the same way, naming it.
//
// Point-to-point transfers (startSend, startRecv) are not built yet: the
// handle of each fails with "nccl: point-to-point transfers (pipeline
// parallel) are not implemented yet" (or its argument check's line), at
// once, without failing the communicator.
//
// NCCL refuses two ranks on one GPU, so more than one rank needs as many
// GPUs; docs/communicator.md ("NCCL backend") and docs/cuda.md say which
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
  /// Point to point is the implementation's (each handle fails, above).
  /// These defaults are for stand-ins of this interface that record what
  /// an executor starts (runtime/tests/Cuda/ActionsCheck.cpp): they issue
  /// nothing and return handle 0, which is never issued.
  CommHandle startSend(const void *, int64_t, ElementType, int, int) override {
    return {};
  }
  CommHandle startRecv(void *, int64_t, ElementType, int, int) override {
    return {};
  }
  int maxTag() const override { return 0; }
  bool hasTransfers() const override { return false; }
  /// Later collectives start after the work queued on `stream` by then
  /// (null: the legacy default stream).
  virtual void setProducerStream(cudaStream_t stream) = 0;
  /// Makes `stream` wait on the device for collective `h` (and every one
  /// issued before it). Success, else an error line: an unknown handle, a
  /// failed collective (its error), or a collective issued outside the
  /// capture `stream` is in (wait() for it before capturing).
  virtual Error streamWait(CommHandle h, cudaStream_t stream) = 0;
  /// The communicator's own stream (for tests and traces).
  virtual cudaStream_t stream() const = 0;
  /// Watches the graph replay just enqueued on `stream` (not capturing):
  /// records an event after it, which the watchdog times as it times a
  /// collective in flight. Past the deadline it aborts with `what` ("replay
  /// of train_step, step 12") and the rank. An error line when the event
  /// cannot be recorded.
  virtual Error watchReplay(cudaStream_t stream, const std::string &what) = 0;
};

/// Sets the device (cudaSetDevice) and creates the NCCL communicator of the
/// ranks of `bootstrap`, which it takes over. A one-line error when there
/// is no usable GPU or NCCL fails. Collective over the ranks:
/// they all-gather their readiness with the unique id, so a rank without a
/// GPU makes every rank fail alike; a failure inside ncclCommInitRank
/// (e.g. two ranks on one GPU) is NCCL's to report on each rank.
/// `watchdogSeconds` <= 0 turns the timeout off; the check for
/// asynchronous NCCL errors stays on.
Expected<std::unique_ptr<NcclCommunicator>>
createNcclCommunicator(std::unique_ptr<Communicator> bootstrap,
                       double watchdogSeconds);

/// The same over a bootstrap communicator the caller keeps (it must outlive
/// the NCCL communicator): what the CUDA executor uses, as the Trainer owns
/// the host communicator. Its split() splits the caller's communicator for
/// the new one's host().
Expected<std::unique_ptr<NcclCommunicator>>
createNcclCommunicator(Communicator &bootstrap, double watchdogSeconds);

} // namespace kiln::runtime::comm

#endif // KILN_RUNTIME_COMM_NCCLCOMMUNICATOR_H
