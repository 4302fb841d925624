//===- Collective.h - What every communicator backend shares ----*- C++ -*-===//
//
// Private to runtime/lib/Comm. The argument checks every backend applies
// at start, the failed-state bookkeeping behind wait(), and the one
// implementation of the reduction rules of docs/communicator.md that the
// CPU backends (MPI, local) apply once the contributions to a chunk have
// been gathered as rows: row r holds rank r's contribution. Also the
// point-to-point transfers' checks and names.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_COMM_COLLECTIVE_H
#define KILN_RUNTIME_COMM_COLLECTIVE_H

#include "kiln/Runtime/Comm/Communicator.h"

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace kiln::runtime::comm {

enum class CollectiveKind {
  AllGather,
  ReduceScatter,
  AllReduce,
  SendRecv,
  Barrier,
  /// A send or receive of a backend without point-to-point transfers (the
  /// default issueTransfer below): it fails at once, as bad arguments do.
  PointToPoint
};

/// E.g. "all-reduce #7 (1237 x bf16, sum)".
std::string describeCollective(CollectiveKind kind, uint64_t id, int64_t count,
                               ElementType type, ReduceOp op);

/// Why these arguments are not a valid collective for a world of `size`
/// ranks, or success: an unknown element type or reduction, a negative
/// count, a null buffer with count > 0, a buffer of more than
/// `maxElements` elements (the backend's limit), overlapping send and
/// receive buffers (an all-reduce may also be exactly in place), or a
/// send-recv's `shift` outside [0, size).
Error checkCollective(CollectiveKind kind, const void *send, const void *recv,
                      int64_t count, ElementType type, ReduceOp op, int size,
                      int64_t maxElements, int shift = 0);

/// E.g. "send #7 (1024 x bf16, to rank 1, tag 3)", "recv #8 (... from rank
/// 0, tag 3)".
std::string describeTransfer(bool send, uint64_t id, int64_t count,
                             ElementType type, int peer, int tag);

/// Why these arguments are not a valid point-to-point transfer of rank
/// `rank` of `size` ranks, or success: a peer that is not another rank of
/// the communicator, a tag outside [0, maxTag], an unknown element type, a
/// negative count, a null buffer with count > 0, or more than
/// `maxElements` elements.
Error checkTransfer(const void *buffer, int64_t count, ElementType type,
                    int peer, int tag, int rank, int size, int maxTag,
                    int64_t maxElements);

/// A backend's Communicator (or NcclCommunicator) whose start calls, and
/// barrier, are one call: issue(kind, ...), which it implements. So each
/// backend writes the dispatch once and the forwarding not at all.
template <typename Base> class IssuingCommunicator : public Base {
public:
  CommHandle startAllGather(const void *send, void *recv, int64_t count,
                            ElementType type) final {
    return issue(CollectiveKind::AllGather, send, recv, count, type,
                 ReduceOp::Sum, 0);
  }
  CommHandle startReduceScatter(const void *send, void *recv, int64_t count,
                                ElementType type, ReduceOp op) final {
    return issue(CollectiveKind::ReduceScatter, send, recv, count, type, op, 0);
  }
  CommHandle startAllReduce(const void *send, void *recv, int64_t count,
                            ElementType type, ReduceOp op) final {
    return issue(CollectiveKind::AllReduce, send, recv, count, type, op, 0);
  }
  CommHandle startSendRecv(const void *send, void *recv, int64_t count,
                           ElementType type, int shift) final {
    return issue(CollectiveKind::SendRecv, send, recv, count, type,
                 ReduceOp::Sum, shift);
  }
  CommHandle startSend(const void *send, int64_t count, ElementType type,
                       int peer, int tag) final {
    return issueTransfer(true, const_cast<void *>(send), count, type, peer,
                         tag);
  }
  CommHandle startRecv(void *recv, int64_t count, ElementType type, int peer,
                       int tag) final {
    return issueTransfer(false, recv, count, type, peer, tag);
  }
  /// No limit of the backend's own.
  int maxTag() const override { return std::numeric_limits<int>::max(); }

protected:
  /// Starts collective `kind` (Barrier: no buffers, count 0); `shift` is a
  /// send-recv's (0 for the others).
  virtual CommHandle issue(CollectiveKind kind, const void *send, void *recv,
                           int64_t count, ElementType type, ReduceOp op,
                           int shift) = 0;
  /// Starts a point-to-point transfer (`send`: from `buffer` to `peer`,
  /// else into `buffer` from `peer`). The default is for a backend without
  /// transfers: issue() of a PointToPoint, which checkCollective refuses.
  virtual CommHandle issueTransfer(bool send, void *buffer, int64_t count,
                                   ElementType type, int peer, int tag) {
    (void)tag;
    return issue(CollectiveKind::PointToPoint, send ? buffer : nullptr,
                 send ? nullptr : buffer, count, type, ReduceOp::Sum, peer);
  }
  /// A barrier through the backend's own queue.
  Error issueBarrier() {
    return this->wait(issue(CollectiveKind::Barrier, nullptr, nullptr, 0,
                            ElementType::F32, ReduceOp::Sum, 0));
  }
};

/// The failed state of a communicator: once a collective fails, it and
/// every later one report an error. Not thread-safe; the backend guards it.
struct FailureState {
  uint64_t failedFrom = 0; // id of the first failed collective; 0: none
  std::string message;
  /// Whether collective `failedFrom` is the one that failed (false after
  /// failFrom: it was only not run).
  bool failedItself = true;
  /// Collectives issued before `failedFrom` that failed after it was set
  /// (a point-to-point failure may come while one is running): their own
  /// errors.
  std::map<uint64_t, std::string> earlier;

  bool failed() const { return failedFrom != 0; }
  /// Records the failure of collective `id` unless one is recorded already
  /// (then, for an `id` before it, keeps `why` as that collective's own).
  void fail(uint64_t id, std::string why);
  /// A failure outside the issue order (a point-to-point transfer's): the
  /// collectives from `from` on (the first not yet started) are not run,
  /// unless a failure is recorded already.
  void failFrom(uint64_t from, std::string why);
  /// What wait() reports for a completed collective `id`.
  Error resultOf(uint64_t id) const;
};

/// out[i] = the reduction over r = 0..nranks-1 of rows[r*count + i] (row r:
/// rank r's contribution to chunk `chunk`), by the rules of
/// docs/communicator.md: an f32 fold in ring order, rows chunk + 1, chunk +
/// 2, ... (mod nranks), ending with row `chunk`, the order in which a ring
/// reduce-scatter (and async TP's, docs/tp.md) adds them; rounded once to
/// bf16 at the end for bf16. `out` may equal `rows` only when nranks == 1.
/// `scratch` is reused f32 space (bf16 only).
void reduceRows(const void *rows, int nranks, int chunk, int64_t count,
                ElementType type, ReduceOp op, void *out,
                std::vector<float> &scratch);

} // namespace kiln::runtime::comm

#endif // KILN_RUNTIME_COMM_COLLECTIVE_H
