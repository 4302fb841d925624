//===- MpiCollectives.cpp - The MPI communicator's collectives ------------===//
//
// Data movement and arithmetic are separate: MPI only moves bytes
// (MPI_FLOAT, MPI_UINT16_T; MPI's own reductions are never used, their
// order is the library's choice), and the communication thread reduces
// the gathered rows with reduceRows in ring order (Collective.h).
//   all-gather      MPI_Iallgather.
//   reduce-scatter  MPI_Ialltoall gathers the N contributions to this
//                   rank's chunk as N rows, then reduceRows.
//   all-reduce      the count elements are cut into N near-equal chunks
//                   (the first count % N one element longer); chunk j is
//                   reduced by rank j as above (MPI_Ialltoallv), and the
//                   reduced chunks are shared with MPI_Iallgatherv. Every
//                   element is reduced once, by one rank, so all ranks
//                   receive the same bits.
//   send-recv       MPI_Irecv from the rank `shift` before, MPI_Isend to
//                   the rank `shift` after (shift 0: a copy).
//   barrier         MPI_Ibarrier.
// Counts of zero complete without MPI calls (every rank skips them alike).
//
//===----------------------------------------------------------------------===//

#include "MpiCommunicatorImpl.h"

#include <algorithm>
#include <cstring>
#include <exception>

namespace kiln::runtime::comm::mpi {

Error MpiCommunicator::finish(MPI_Request &request, const char *call) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point spinUntil = Clock::now() + kSpin;
  std::chrono::microseconds sleep = kMinSleep;
  for (;;) {
    int done = 0;
    int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
      return Error(std::string(call) + " failed: " + mpiErrorText(rc));
    if (done)
      return Error::success();
    Clock::time_point now = Clock::now();
    if (now < spinUntil)
      continue;
    abortIfAsked();
    answerPeers();
    int64_t timeout = timeoutSeconds_.load();
    if (timeout > 0 && now - runningSince_ >= std::chrono::seconds(timeout)) {
      abandoned_ = true;
      return Error("not complete after " + std::to_string(timeout) +
                   " s (the deadline, comm.train_timeout_seconds); " +
                   missingRanks());
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, kMaxSleep);
  }
}

Error MpiCommunicator::runCaught(const Request &r) {
  // Nothing may escape this thread: scratch space that cannot be had is
  // the collective's error.
  try {
    if (r.task)
      return r.task();
    return run(r);
  } catch (const std::exception &e) {
    return Error("mpi " +
                 describeCollective(r.kind, r.id, r.count, r.type, r.op) +
                 ": " + e.what());
  }
}

Error MpiCommunicator::run(const Request &r) {
  Error error;
  if (r.kind == CollectiveKind::Barrier) {
    MPI_Request request;
    int rc = MPI_Ibarrier(comm_, &request);
    error = rc != MPI_SUCCESS
                ? Error("MPI_Ibarrier failed: " + mpiErrorText(rc))
                : finish(request, "MPI_Ibarrier");
  } else if (r.count == 0) {
    return Error::success();
  } else if (r.kind == CollectiveKind::AllGather) {
    MPI_Request request;
    int count = static_cast<int>(r.count);
    int rc = MPI_Iallgather(r.send, count, mpiType(r.type), r.recv, count,
                            mpiType(r.type), comm_, &request);
    error = rc != MPI_SUCCESS
                ? Error("MPI_Iallgather failed: " + mpiErrorText(rc))
                : finish(request, "MPI_Iallgather");
  } else if (r.kind == CollectiveKind::SendRecv) {
    error = sendRecv(r);
  } else if (r.kind == CollectiveKind::ReduceScatter) {
    // Row j of rows_ = rank j's contribution to this rank's chunk.
    rows_.resize(static_cast<size_t>(size_) * r.count * elementBytes(r.type));
    MPI_Request request;
    int count = static_cast<int>(r.count);
    int rc = MPI_Ialltoall(r.send, count, mpiType(r.type), rows_.data(), count,
                           mpiType(r.type), comm_, &request);
    error = rc != MPI_SUCCESS
                ? Error("MPI_Ialltoall failed: " + mpiErrorText(rc))
                : finish(request, "MPI_Ialltoall");
    if (!error)
      reduceRows(rows_.data(), size_, rank_, r.count, r.type, r.op, r.recv,
                 scratch_);
  } else {
    error = allReduce(r);
  }
  if (!error)
    return Error::success();
  return Error("mpi " +
               describeCollective(r.kind, r.id, r.count, r.type, r.op) + ": " +
               error.message());
}

Error MpiCommunicator::sendRecv(const Request &r) {
  if (r.shift == 0) {
    std::memcpy(r.recv, r.send, r.count * elementBytes(r.type));
    return Error::success();
  }
  int count = static_cast<int>(r.count);
  int to = (rank_ + r.shift) % size_, from = (rank_ - r.shift + size_) % size_;
  // Collectives are issued in one order on every rank and run one at a
  // time, so one tag cannot pair a message with another collective's.
  MPI_Request requests[2];
  int rc =
      MPI_Irecv(r.recv, count, mpiType(r.type), from, 0, comm_, &requests[0]);
  if (rc != MPI_SUCCESS)
    return Error("MPI_Irecv failed: " + mpiErrorText(rc));
  rc = MPI_Isend(r.send, count, mpiType(r.type), to, 0, comm_, &requests[1]);
  if (rc != MPI_SUCCESS) {
    MPI_Cancel(&requests[0]);
    MPI_Request_free(&requests[0]);
    return Error("MPI_Isend failed: " + mpiErrorText(rc));
  }
  if (Error error = finish(requests[1], "MPI_Isend")) {
    MPI_Cancel(&requests[0]);
    MPI_Request_free(&requests[0]);
    return error;
  }
  return finish(requests[0], "MPI_Irecv");
}

Error MpiCommunicator::allReduce(const Request &r) {
  // Chunk j = [offset_j, offset_j + length_j): the first count % N chunks
  // hold one element more.
  int n = size_;
  int count = static_cast<int>(r.count);
  std::vector<int> &lengths = sendCounts_, &offsets = sendDispls_;
  lengths.resize(n);
  offsets.resize(n);
  for (int j = 0, at = 0; j < n; ++j) {
    lengths[j] = count / n + (j < count % n ? 1 : 0);
    offsets[j] = at;
    at += lengths[j];
  }
  int mine = lengths[rank_];
  recvCounts_.assign(n, mine);
  recvDispls_.resize(n);
  for (int j = 0; j < n; ++j)
    recvDispls_[j] = j * mine;
  int64_t bytes = elementBytes(r.type);
  rows_.resize(static_cast<size_t>(n) * mine * bytes);
  MPI_Datatype type = mpiType(r.type);

  MPI_Request request;
  int rc = MPI_Ialltoallv(r.send, lengths.data(), offsets.data(), type,
                          rows_.data(), recvCounts_.data(), recvDispls_.data(),
                          type, comm_, &request);
  if (rc != MPI_SUCCESS)
    return Error("MPI_Ialltoallv failed: " + mpiErrorText(rc));
  if (Error error = finish(request, "MPI_Ialltoallv"))
    return error;
  // The send buffer is no longer read, so with send == recv the reduced
  // chunk may go straight to its place in recv.
  void *chunk = static_cast<unsigned char *>(r.recv) + offsets[rank_] * bytes;
  reduceRows(rows_.data(), n, rank_, mine, r.type, r.op, chunk, scratch_);
  rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, r.recv,
                       lengths.data(), offsets.data(), type, comm_, &request);
  if (rc != MPI_SUCCESS)
    return Error("MPI_Iallgatherv failed: " + mpiErrorText(rc));
  return finish(request, "MPI_Iallgatherv");
}

} // namespace kiln::runtime::comm::mpi
