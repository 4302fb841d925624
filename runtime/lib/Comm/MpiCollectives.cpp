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
// Point-to-point transfers: MPI_Isend/MPI_Irecv on comm_ with the user's
// tag + kTransferTagBase (tag 0 is the send-recv collective's), posted in
// issue order and tested with MPI_Testsome whenever the thread polls
// (progressTransfers). A receive that gets another count than it asked
// for fails its handle only; any other MPI error fails the communicator
// from the first collective not yet started, and so does the deadline,
// which also abandons every other transfer (the run is to end).
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
    // Transfers are not in the issue order: they go on meanwhile.
    progressTransfers();
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

// --- Point-to-point transfers ----------------------------------------------

bool MpiCommunicator::progressTransfers() {
  bool moved = false;
  if (transfersQueued_.exchange(false)) {
    std::deque<Transfer> fresh;
    {
      std::lock_guard<std::mutex> lock(mu_);
      fresh.swap(transfers_);
    }
    for (const Transfer &transfer : fresh)
      postTransfer(transfer);
    moved = !fresh.empty();
  }
  if (posted_.empty())
    return moved;

  int n = static_cast<int>(posted_.size()), completed = 0;
  doneIndices_.resize(n);
  doneStatuses_.resize(n);
  int rc = MPI_Testsome(n, postedRequests_.data(), &completed,
                        doneIndices_.data(), doneStatuses_.data());
  if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
    // MPI cannot say which completed: every posted transfer fails.
    std::vector<Transfer> failed;
    failed.swap(posted_);
    postedRequests_.clear();
    for (const Transfer &transfer : failed)
      failTransfer(transfer, "mpi " + transfer.describe() +
                                 ": MPI_Testsome failed: " + mpiErrorText(rc));
    return true;
  }
  if (completed == MPI_UNDEFINED)
    completed = 0;
  for (int k = 0; k < completed; ++k) {
    const Transfer &transfer = posted_[doneIndices_[k]];
    const MPI_Status &status = doneStatuses_[k];
    int code = rc == MPI_ERR_IN_STATUS ? status.MPI_ERROR : MPI_SUCCESS;
    int errorClass = MPI_SUCCESS;
    if (code != MPI_SUCCESS)
      MPI_Error_class(code, &errorClass);
    std::string name = "mpi " + transfer.describe() + ": ";
    if (errorClass == MPI_ERR_TRUNCATE) {
      // The two sides disagree on the count: this transfer's error only.
      completeTransfer(transfer, name + "the matching send has more than " +
                                     std::to_string(transfer.count) +
                                     " elements");
    } else if (code != MPI_SUCCESS) {
      failTransfer(transfer, name +
                                 (transfer.send ? "MPI_Isend" : "MPI_Irecv") +
                                 " failed: " + mpiErrorText(code));
    } else if (int got = 0;
               !transfer.send && (MPI_Get_count(&status, mpiType(transfer.type),
                                                &got) != MPI_SUCCESS ||
                                  got != transfer.count)) {
      completeTransfer(transfer, name + "the matching send had " +
                                     std::to_string(got) + " elements");
    } else {
      completeTransfer(transfer, "");
    }
  }
  if (completed > 0) {
    // Completed requests are MPI_REQUEST_NULL now: keep the others.
    size_t kept = 0;
    for (size_t i = 0; i < posted_.size(); ++i)
      if (postedRequests_[i] != MPI_REQUEST_NULL) {
        posted_[kept] = std::move(posted_[i]);
        postedRequests_[kept++] = postedRequests_[i];
      }
    posted_.resize(kept);
    postedRequests_.resize(kept);
    moved = true;
  }

  // The deadline: a transfer not complete `timeout` seconds after it was
  // issued fails the communicator; its MPI request stays pending.
  int64_t timeout = timeoutSeconds_.load();
  if (timeout <= 0 || posted_.empty())
    return moved;
  auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < posted_.size(); ++i) {
    if (now - posted_[i].issued < std::chrono::seconds(timeout))
      continue;
    Transfer late = posted_[i];
    posted_.erase(posted_.begin() + i);
    postedRequests_.erase(postedRequests_.begin() + i);
    abandoned_ = true;
    std::string line =
        "mpi " + late.describe() + ": not complete after " +
        std::to_string(timeout) +
        " s (the deadline, comm.train_timeout_seconds); rank " +
        std::to_string(late.peer) + " has not " +
        (late.send ? "received" : "sent") +
        " it (stopped, hung, or its transfers do not match this one)";
    failTransfer(late, line);
    abandonTransfers(line);
    return true;
  }
  return moved;
}

void MpiCommunicator::postTransfer(const Transfer &t) {
  MPI_Request request = MPI_REQUEST_NULL;
  int count = static_cast<int>(t.count), tag = t.tag + kTransferTagBase;
  int rc = t.send ? MPI_Isend(t.buffer, count, mpiType(t.type), t.peer, tag,
                              comm_, &request)
                  : MPI_Irecv(t.buffer, count, mpiType(t.type), t.peer, tag,
                              comm_, &request);
  if (rc != MPI_SUCCESS) {
    failTransfer(t, "mpi " + t.describe() + ": " +
                        (t.send ? "MPI_Isend" : "MPI_Irecv") +
                        " failed: " + mpiErrorText(rc));
    return;
  }
  posted_.push_back(t);
  postedRequests_.push_back(request);
}

void MpiCommunicator::completeTransfer(const Transfer &transfer,
                                       std::string error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    TransferState &state = transferStates_[transfer.id];
    state.done = true;
    state.error = std::move(error);
    pruneTransfersLocked();
  }
  doneCv_.notify_all();
}

void MpiCommunicator::failTransfer(const Transfer &transfer,
                                   const std::string &line) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    TransferState &state = transferStates_[transfer.id];
    state.done = true;
    state.error = line;
    // Collectives already started are not affected; the next ones fail.
    failure_.failFrom(firstUnstartedLocked(), line);
  }
  doneCv_.notify_all();
}

void MpiCommunicator::abandonTransfers(const std::string &why) {
  std::deque<Transfer> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued.swap(transfers_);
  }
  std::vector<Transfer> posted;
  posted.swap(posted_);
  postedRequests_.clear(); // left pending: MPI is not finalised
  for (const Transfer &t : posted)
    completeTransfer(t, "mpi " + t.describe() + ": abandoned: " + why);
  for (const Transfer &t : queued)
    completeTransfer(t, "mpi " + t.describe() + ": abandoned: " + why);
}

} // namespace kiln::runtime::comm::mpi
