//===- MpiCommunicatorImpl.h - The MPI communicator's class -----*- C++ -*-===//
//
// Internal to the MPI communicator, whose code is in three files by
// concern: MpiCommunicator.cpp (the callers' side, the communication
// thread, MPI's set-up and tear-down), MpiCollectives.cpp (each collective
// and point-to-point transfer as non-blocking MPI calls, and the
// reductions) and MpiDeadline.cpp (the side channel that names late ranks,
// and aborting the run).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_COMM_MPICOMMUNICATORIMPL_H
#define KILN_RUNTIME_COMM_MPICOMMUNICATORIMPL_H

#include "kiln/Runtime/Comm/Communicator.h"

#include "Collective.h"

#include <mpi.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kiln::runtime::comm::mpi {

// Polling: MPI_Test back to back for kSpin, then sleeps from kMinSleep
// doubling to kMaxSleep.
inline constexpr std::chrono::microseconds kSpin{50};
inline constexpr std::chrono::microseconds kMinSleep{2};
inline constexpr std::chrono::microseconds kMaxSleep{200};
// The side channel: how often an idle thread looks for questions, how long
// a rank whose collective passed its deadline waits for the answers.
inline constexpr std::chrono::milliseconds kIdlePoll{100};
inline constexpr std::chrono::seconds kAnswerGrace{2};
inline constexpr int kAskTag = 1, kAnswerTag = 2;
// Tags on comm_: the send-recv collective uses 0; a transfer's tag t is
// sent as t + kTransferTagBase.
inline constexpr int kTransferTagBase = 1;

struct Request {
  uint64_t id = 0;
  CollectiveKind kind = CollectiveKind::Barrier;
  ElementType type = ElementType::F32;
  ReduceOp op = ReduceOp::Sum;
  const void *send = nullptr;
  void *recv = nullptr;
  int64_t count = 0;
  int shift = 0; // a send-recv's
  /// Set at start when the arguments are invalid: the request fails
  /// (in its turn) without MPI calls.
  std::string invalid;
  /// Work other than a collective, run in its turn on the communication
  /// thread (split's MPI_Comm_split).
  std::function<Error()> task;
  /// 1, 2, ...: this request's place among the collectives (and splits) of
  /// this rank, which, unlike the handle id, is the same on every rank:
  /// transfers take handle ids too. What the side channel compares.
  uint64_t ordinal = 0;
};

/// A point-to-point transfer (startSend, startRecv).
struct Transfer {
  uint64_t id = 0;
  bool send = true;
  void *buffer = nullptr;
  int64_t count = 0;
  ElementType type = ElementType::F32;
  int peer = 0, tag = 0;
  std::chrono::steady_clock::time_point issued; // the deadline counts from it
  /// "send #7 (1024 x bf16, to rank 1, tag 3)".
  std::string describe() const {
    return describeTransfer(send, id, count, type, peer, tag);
  }
};

/// A transfer's completion, as wait() sees it.
struct TransferState {
  bool done = false;
  std::string error; // its line; empty: success
};

/// MPI_THREAD_MULTIPLE, unless KILN_MPI_THREAD_LEVEL asks for funneled or
/// serialized (to check that the backend needs no more than FUNNELED).
int requestedThreadLevel();
/// MPI's text for an error code.
std::string mpiErrorText(int code);
/// The MPI datatype that moves elements of `type` as bytes.
MPI_Datatype mpiType(ElementType type);

class MpiCommunicator final : public IssuingCommunicator<Communicator> {
public:
  /// The world's communicator (MPI_COMM_WORLD, duplicated).
  MpiCommunicator() = default;
  /// A sub-communicator over `comm`, which split() made and this one owns.
  explicit MpiCommunicator(MPI_Comm comm) : handed_(comm) {}
  ~MpiCommunicator() override;

  /// Starts the communication thread and waits for it to set MPI up.
  Error launch();

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char *backendName() const override { return "mpi"; }

  Error wait(CommHandle handle) override;
  bool test(CommHandle handle) override;
  /// MPI_TAG_UB less the tags below kTransferTagBase.
  int maxTag() const override { return maxTag_; }

  Error barrier() override { return issueBarrier(); }

  Error failure() const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.failed())
      return Error::success();
    return Error(failure_.message);
  }

  void setTimeout(int64_t seconds) override {
    timeoutSeconds_.store(std::max<int64_t>(0, seconds));
  }
  [[noreturn]] void abortRun(int code) override;

  Expected<std::unique_ptr<Communicator>> split(int color, int key) override;

private:
  CommHandle issue(CollectiveKind kind, const void *send, void *recv,
                   int64_t count, ElementType type, ReduceOp op,
                   int shift) override;
  CommHandle issueTransfer(bool send, void *buffer, int64_t count,
                           ElementType type, int peer, int tag) override;
  Error sendRecv(const Request &request);
  /// The id of the first request in queue_ (not started), else nextId_.
  uint64_t firstUnstartedLocked() const {
    return queue_.empty() ? nextId_ : queue_.front().id;
  }
  /// Forgets the transfers wait() can answer without their state: done,
  /// successful, at or below doneThrough_ and before any failure.
  void pruneTransfersLocked();

  // On the communication thread only.
  void threadMain();
  Error setUp();
  /// Makes comm_ (and side_, a duplicate of it for the progress channel)
  /// return error codes, and reads this rank and the size: an MPI code.
  int adoptComm();
  void tearDown();
  Error runCaught(const Request &request);
  Error run(const Request &request);
  Error finish(MPI_Request &request, const char *call);
  Error allReduce(const Request &request);
  // Transfers (MpiCollectives.cpp). progressTransfers posts the queued
  // ones, tests the posted ones and applies the deadline; true when
  // something was posted or completed.
  bool progressTransfers();
  void postTransfer(const Transfer &transfer);
  void completeTransfer(const Transfer &transfer, std::string error);
  /// A transport error or the deadline: the transfer fails with `line` and
  /// so does the communicator, from the first collective not started.
  void failTransfer(const Transfer &transfer, const std::string &line);
  /// After a deadline (abandoned_): every transfer still posted or queued
  /// fails, its MPI request left pending.
  void abandonTransfers(const std::string &why);
  void answerPeers();
  std::string missingRanks();
  void abortIfAsked();

  // Shared, guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable workCv_; // a request was queued, or stopping_
  std::condition_variable doneCv_; // doneThrough_ moved, or set-up ended
  std::deque<Request> queue_;      // collectives and splits, in issue order
  uint64_t nextId_ = 1;            // the id the next start call gets
  uint64_t nextOrdinal_ = 1;       // the ordinal the next collective gets
  /// Every collective (and split) with id <= this is complete; says nothing
  /// of transfers.
  uint64_t doneThrough_ = 0;
  uint64_t runningId_ = 0; // the collective taken from queue_, not done
  FailureState failure_;
  std::deque<Transfer> transfers_; // issued, not yet posted; issue order
  /// The transfers wait() must tell apart from collectives (pruned).
  std::map<uint64_t, TransferState> transferStates_;
  bool stopping_ = false;
  bool setUpDone_ = false;
  Error setUpError_;

  // Written by the communication thread before set-up ends, then constant.
  int rank_ = 0, size_ = 1;
  int maxTag_ = 0;

  // Set by any thread, read by the communication thread.
  std::atomic<int64_t> timeoutSeconds_{0};
  std::atomic<int> abortCode_{-1};
  std::atomic<bool> transfersQueued_{false}; // transfers_ may hold some

  // The communication thread's own.
  std::thread thread_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm side_ = MPI_COMM_NULL; // questions and answers about progress
  // The side channel's answer: the collective in MPI now, else the last
  // one completed (0, 0: none yet), as (ordinal, id).
  uint64_t running_ = 0, runningHandle_ = 0;
  uint64_t finished_ = 0, finishedHandle_ = 0;
  std::chrono::steady_clock::time_point runningSince_;
  // A request left pending when its deadline passed: MPI may still write
  // to its buffers, so MPI is not finalised and the run ends by abortRun.
  bool abandoned_ = false;
  // Buffers of the side channel's messages; they stay put, since sends and
  // receives of a timed-out ask may never complete.
  std::deque<std::array<int64_t, 2>> answers_; // (ordinal, id)
  int64_t asked_ = 0;
  std::vector<int64_t> peerReached_; // rank r's answer at 2r, 2r + 1
  // The posted transfers and their MPI requests, index for index.
  std::vector<Transfer> posted_;
  std::vector<MPI_Request> postedRequests_;
  std::vector<int> doneIndices_;
  std::vector<MPI_Status> doneStatuses_;
  bool ownsMpi_ = false;
  /// A sub-communicator's split result (null for the world's).
  MPI_Comm handed_ = MPI_COMM_NULL;
  /// The thread level MPI provides: a sub-communicator's own thread needs
  /// MPI_THREAD_MULTIPLE.
  int provided_ = MPI_THREAD_SINGLE;
  std::vector<unsigned char> rows_;
  std::vector<float> scratch_;
  std::vector<int> sendCounts_, sendDispls_, recvCounts_, recvDispls_;
};

} // namespace kiln::runtime::comm::mpi

#endif // KILN_RUNTIME_COMM_MPICOMMUNICATORIMPL_H
