//===- Communicator.h - Collectives over the ranks of a run -----*- C++ -*-===//
//
// The interface the FSDP runtime talks to; docs/communicator.md is its
// normative description and this header its summary. Backends: MPI (CPU,
// MpiCommunicator.h), local (world size 1, LocalCommunicator.h); NCCL
// (#6) is to implement the same interface and pass the same conformance
// suite (runtime/tests/Comm).
//
// - Ranks 0..size()-1. Every rank issues the same collectives, with the
//   same count, element type and reduction, in the same order; that order
//   (the order the start calls return in) is what matches them up across
//   ranks. Breaking this rule is undefined (a hang or garbage).
// - Collectives are asynchronous: start* returns a CommHandle at once and
//   the collective makes progress on its own while the caller computes
//   (test() only looks, it never drives progress). wait() blocks until it
//   is complete. Any number may be in flight; they complete in issue
//   order, so when one is complete so is everything issued before it.
// - Buffers are the backend's memory (host memory for MPI and local,
//   device memory for NCCL) and belong to the collective from start until
//   its wait returns or test() says complete: the send buffer must not
//   change, the receive buffer must not be touched. Send and receive
//   buffers must not overlap, except that an all-reduce may be in place
//   (send == recv).
// - Element types f32 and bf16 (uint16_t bit patterns). Reductions (sum,
//   max) are deterministic: result element i is a fixed function of the N
//   contributions to it, computed in f32 in ring order (the chunk's
//   ranks j+1, j+2, ..., j mod N), and for bf16 rounded to bf16 once at
//   the end (RNE). So results are
//   bit-identical across runs for a given world size, and an all-reduce
//   gives every rank the same bits. The exact rules are in
//   docs/communicator.md ("Reduction semantics"). NCCL does not keep this
//   rule (exactRingOrderReduction() is false there); see
//   NcclCommunicator.h for what it keeps.
// - Errors are one-line messages, never exceptions or aborts. A failed
//   collective (bad arguments, a transport error) puts the communicator in
//   a failed state: that collective and every later one report the error
//   from wait(), and failure() returns the first message. Collectives
//   issued before the failure are not affected.
// - Point to point (pipeline parallelism): startSend/startRecv move count
//   elements to or from one peer, matched by (sender, receiver, tag) and,
//   among transfers with the same triple, by issue order. They are outside
//   the collective issue order: starting one never blocks nor waits for
//   earlier collectives, no collective waits for one, waiting on one waits
//   for that transfer only, and ranks need not issue the same transfers.
//   Bad arguments fail that handle only; a transport error or the deadline
//   fails the communicator. docs/communicator.md, "Point to point".
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_COMM_COMMUNICATOR_H
#define KILN_RUNTIME_COMM_COMMUNICATOR_H

#include "kiln/Runtime/Support/Error.h"

#include <cstdint>
#include <memory>
#include <string>

namespace kiln::runtime::comm {

/// U8 is raw bytes (FP8 codes): all-gathers only, never reduced.
enum class ElementType { F32, BF16, U8 };
enum class ReduceOp { Sum, Max };

/// Bytes of one element: 4 for f32, 2 for bf16, 1 for u8.
int64_t elementBytes(ElementType type);
/// "f32", "bf16", "u8".
const char *elementTypeName(ElementType type);
/// "sum", "max".
const char *reduceOpName(ReduceOp op);

/// Names one started collective. Handles are numbered 1, 2, ... in issue
/// order per communicator; 0 is never issued.
struct CommHandle {
  uint64_t id = 0;
};

class Communicator {
public:
  virtual ~Communicator();

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "mpi", "local", ...: for messages.
  virtual const char *backendName() const = 0;

  /// recv[r*count + i] = rank r's send[i], for r < size(), i < count.
  /// `send` holds count elements, `recv` size()*count.
  virtual CommHandle startAllGather(const void *send, void *recv, int64_t count,
                                    ElementType type) = 0;

  /// recv[i] = reduce over ranks r of rank r's send[rank()*count + i], for
  /// i < count. `send` holds size()*count elements (chunk j goes to rank
  /// j), `recv` count.
  virtual CommHandle startReduceScatter(const void *send, void *recv,
                                        int64_t count, ElementType type,
                                        ReduceOp op) = 0;

  /// recv[i] = reduce over ranks r of rank r's send[i], for i < count; the
  /// same bits on every rank. send == recv is allowed.
  virtual CommHandle startAllReduce(const void *send, void *recv, int64_t count,
                                    ElementType type, ReduceOp op) = 0;

  /// One step of a ring: sends `send` (count elements) to the rank `shift`
  /// places after this one (mod size()) and receives into `recv` what the
  /// rank `shift` places before it sent. `shift` is in [0, size()); 0
  /// copies. Every rank issues it with the same shift and count.
  virtual CommHandle startSendRecv(const void *send, void *recv, int64_t count,
                                   ElementType type, int shift) = 0;

  /// Point to point: sends `count` elements of `send` to rank `peer` of
  /// this communicator (not rank()), with `tag` in [0, maxTag()]. It
  /// matches the startRecv of `peer` with this rank as its peer and the same
  /// tag; transfers with the same (sender, receiver, tag) match in issue
  /// order. Counts and types must agree on both sides. Not in the
  /// collective issue order: it never blocks or waits for a collective, and
  /// no collective waits for it. `send` belongs to the transfer until its
  /// wait returns (or test() says complete). The handle is numbered with
  /// the collectives'.
  virtual CommHandle startSend(const void *send, int64_t count,
                               ElementType type, int peer, int tag) = 0;
  /// Receives `count` elements into `recv` from rank `peer`'s startSend
  /// with the same tag; as startSend otherwise.
  virtual CommHandle startRecv(void *recv, int64_t count, ElementType type,
                               int peer, int tag) = 0;
  /// Whether this backend moves point-to-point transfers (MPI); one that
  /// does not (local: no peer; NCCL: not built yet) fails each transfer's
  /// handle with a line saying so.
  virtual bool hasTransfers() const { return true; }
  /// The largest tag a transfer may carry (MPI: MPI_TAG_UB less what the
  /// backend reserves, at least 32766).
  virtual int maxTag() const = 0;

  /// Blocks until the collective is complete (hence every collective
  /// issued before it; nothing is said of point-to-point transfers), or,
  /// for a transfer's handle, until that transfer is complete. Success,
  /// else its error line. Waiting again on the same handle returns the
  /// same answer; a handle this communicator did not issue is an error
  /// (which does not fail the communicator).
  virtual Error wait(CommHandle handle) = 0;

  /// True when wait(handle) would return without blocking: the collective
  /// or transfer is complete, or the handle was not issued here. Never
  /// blocks and never drives progress.
  virtual bool test(CommHandle handle) = 0;

  /// A barrier over all ranks, issued like a collective and waited for:
  /// returns once every rank has issued it, and so after every collective
  /// this rank issued before it is complete.
  virtual Error barrier() = 0;

  /// The first error of this communicator if it has failed, else success.
  virtual Error failure() const = 0;

  /// A deadline for collectives from now on: one this rank's backend has
  /// been running for `seconds` without completing fails the communicator
  /// with a line saying which ranks had not arrived at it. 0 (the default)
  /// waits forever. Backends whose collectives complete at once (local)
  /// ignore it.
  virtual void setTimeout(int64_t seconds) { (void)seconds; }

  /// Ends every rank of the run with exit code `code`, now: for when this
  /// communicator failed and other ranks may wait forever (stopped, or in
  /// a collective that cannot complete). The caller prints why first. MPI:
  /// MPI_Abort; the default ends this process only.
  [[noreturn]] virtual void abortRun(int code);

  /// Whether reductions follow the ring-order f32 rule above bit for bit
  /// (MPI, local). A backend that reduces in its library's own order
  /// (NCCL) returns false and documents what it guarantees instead; the
  /// conformance suite then checks its sums against an error bound.
  virtual bool exactRingOrderReduction() const { return true; }

  /// The communicator of the ranks of this one that pass the same `color`
  /// (>= 0), numbered by `key` then by rank: MPI_Comm_split's rule. Issued
  /// like a collective, so every rank calls it in the same place of the
  /// issue order; it returns once the new communicator is ready. It has
  /// its own issue order, handles and failed state; it must be destroyed
  /// before this one. A one-line error where the backend cannot split
  /// (MPI without MPI_THREAD_MULTIPLE; NCCL's needs its host
  /// communicator to split too).
  virtual Expected<std::unique_ptr<Communicator>> split(int color, int key);
};

/// The communicators of the three axes of the mesh `[pp, dp_shard, tp]`
/// (pp outermost; docs/tp.md, docs/pp.md), made from the world's: rank r
/// sits at (r / (dp_shard*tp), (r / tp) % dp_shard, r % tp). Its pp axis is
/// the ranks with its dp_shard and tp coordinates, its dp_shard axis the
/// ranks with its pp and tp coordinates, its tp axis the ranks with its pp
/// and dp_shard coordinates, each numbered by world rank, so a rank's
/// position on an axis is its coordinate there. An axis of size 1 is a
/// local communicator and one that spans the world is `world` itself, so
/// with pp = tp = 1 the dp_shard axis is exactly the world communicator
/// and nothing is split. The splits that are needed are made in the order
/// pp, dp_shard, tp on every rank.
struct AxisCommunicators {
  Communicator *pp = nullptr;
  Communicator *dpShard = nullptr;
  Communicator *tp = nullptr;
  std::unique_ptr<Communicator> ownedPp, ownedDpShard, ownedTp;
};
/// `world.size()` must be pp x dpShard x tp; every rank calls it alike.
Expected<AxisCommunicators> splitMesh(Communicator &world, int64_t pp,
                                      int64_t dpShard, int64_t tp);

/// The communicator the launcher asks for: MPI when this process was
/// started by an MPI launcher (launchedByMpi()), else a local one of world
/// size 1. A one-line error when MPI cannot be set up.
Expected<std::unique_ptr<Communicator>> createCommunicator();

/// Whether the environment is that of an MPI launcher (mpirun/mpiexec of
/// Open MPI, or a PMI/PMIx launcher such as srun or MPICH's Hydra).
bool launchedByMpi();

} // namespace kiln::runtime::comm

#endif // KILN_RUNTIME_COMM_COMMUNICATOR_H
