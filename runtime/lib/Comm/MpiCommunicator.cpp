//===- MpiCommunicator.cpp - Collectives over MPI, one progress thread ----===//
//
// Threads. The caller's threads only touch the request queue under `mu_`.
// The communication thread makes every MPI call: MPI_Init_thread, the
// collectives, MPI_Finalize. It takes requests in issue order and runs each
// to completion with non-blocking MPI calls it polls (MPI_Test): tight
// polling for a short while, then sleeps that double up to a cap, so that a
// rank whose peers are late leaves its core to the compute thread instead
// of spinning in MPI (ranks are oversubscribed on small machines). Between
// requests it sleeps on `workCv_`. Completing collective k moves
// doneThrough_ to just before the next collective in the queue and wakes
// the waiters; collectives finish one after the other, which is what makes
// their completion follow issue order.
//
// Point-to-point transfers are not in that queue. startSend/startRecv put
// them on a queue of their own (`transfers_`), which the thread empties
// whenever it polls (before each collective, inside every collective's
// polling loop, and while only transfers are in flight), posting each as
// MPI_Isend/MPI_Irecv in issue order (so same-tag transfers match in that
// order) and keeping it posted; every poll then tests the posted ones
// (MPI_Testsome) and marks each complete on its own (`transferStates_`,
// which wait() looks at for a transfer's handle). With only transfers in
// flight the thread polls like a collective's loop: spinning 50 us, then
// sleeping 2 us doubling to 200 us, woken early by new work.
//
// The collectives and transfers themselves: MpiCollectives.cpp; the
// deadline: MpiDeadline.cpp.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Comm/MpiCommunicator.h"

#include "MpiCommunicatorImpl.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#ifdef __linux__
#include <sys/prctl.h>
#endif

namespace kiln::runtime::comm {

namespace {
/// MPI may be initialised once per process; these track who holds it.
std::mutex processMutex;
bool communicatorExists = false;
bool finalisedByUs = false;
} // namespace

namespace mpi {

/// MPI_THREAD_MULTIPLE, unless KILN_MPI_THREAD_LEVEL asks for funneled or
/// serialized (to check that the backend needs no more than FUNNELED).
int requestedThreadLevel() {
  const char *level = std::getenv("KILN_MPI_THREAD_LEVEL");
  if (level && std::strcmp(level, "funneled") == 0)
    return MPI_THREAD_FUNNELED;
  if (level && std::strcmp(level, "serialized") == 0)
    return MPI_THREAD_SERIALIZED;
  return MPI_THREAD_MULTIPLE;
}

std::string mpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(text, length);
}

MPI_Datatype mpiType(ElementType type) {
  switch (type) {
  case ElementType::BF16:
    return MPI_UINT16_T;
  case ElementType::U8:
    return MPI_UINT8_T;
  default:
    return MPI_FLOAT;
  }
}

Error MpiCommunicator::launch() {
  try {
    thread_ = std::thread([this] { threadMain(); });
  } catch (const std::exception &e) {
    return Error(std::string("mpi: cannot start the communication thread: ") +
                 e.what());
  }
  std::unique_lock<std::mutex> lock(mu_);
  doneCv_.wait(lock, [this] { return setUpDone_; });
  return setUpError_;
}

MpiCommunicator::~MpiCommunicator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  workCv_.notify_one();
  if (thread_.joinable())
    thread_.join();
  if (handed_ != MPI_COMM_NULL)
    return; // a sub-communicator: the world's still holds MPI
  std::lock_guard<std::mutex> lock(processMutex);
  communicatorExists = false;
}

Expected<std::unique_ptr<Communicator>> MpiCommunicator::split(int color,
                                                               int key) {
  if (color < 0)
    return Error("mpi: split needs a color of 0 or more, got " +
                 std::to_string(color));
  if (provided_ < MPI_THREAD_MULTIPLE)
    return Error("mpi: a sub-communicator has its own communication thread, "
                 "which needs MPI_THREAD_MULTIPLE; this MPI provides less "
                 "(or KILN_MPI_THREAD_LEVEL asked for less)");
  // MPI_Comm_split is collective over comm_: it runs on this
  // communicator's thread in its place in the issue order.
  auto made = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
  Request request;
  request.task = [this, made, color, key]() -> Error {
    int rc = MPI_Comm_split(comm_, color, key, made.get());
    if (rc != MPI_SUCCESS)
      return Error("mpi: MPI_Comm_split failed: " + mpiErrorText(rc));
    return Error::success();
  };
  CommHandle handle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    request.id = handle.id = nextId_++;
    request.ordinal = nextOrdinal_++;
    queue_.push_back(std::move(request));
  }
  workCv_.notify_one();
  if (Error e = wait(handle))
    return e;
  auto child = std::make_unique<MpiCommunicator>(*made);
  child->provided_ = provided_;
  if (Error e = child->launch())
    return e;
  return std::unique_ptr<Communicator>(std::move(child));
}

CommHandle MpiCommunicator::issue(CollectiveKind kind, const void *send,
                                  void *recv, int64_t count, ElementType type,
                                  ReduceOp op, int shift) {
  Request request;
  request.shift = shift;
  request.kind = kind;
  request.type = type;
  request.op = op;
  request.send = send;
  request.recv = recv;
  request.count = count;
  CommHandle handle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    request.id = handle.id = nextId_++;
    request.ordinal = nextOrdinal_++;
    if (Error why = checkCollective(kind, send, recv, count, type, op, size_,
                                    INT_MAX, shift))
      request.invalid = "mpi " +
                        describeCollective(kind, request.id, count, type, op) +
                        ": " + why.message();
    queue_.push_back(std::move(request));
  }
  workCv_.notify_one();
  return handle;
}

CommHandle MpiCommunicator::issueTransfer(bool send, void *buffer,
                                          int64_t count, ElementType type,
                                          int peer, int tag) {
  Transfer transfer;
  transfer.send = send;
  transfer.buffer = buffer;
  transfer.count = count;
  transfer.type = type;
  transfer.peer = peer;
  transfer.tag = tag;
  transfer.issued = std::chrono::steady_clock::now();
  CommHandle handle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    transfer.id = handle.id = nextId_++;
    TransferState &state = transferStates_[transfer.id];
    // Bad arguments fail this handle only: a transfer has no place in the
    // collective issue order that skipping it could break.
    if (Error why = checkTransfer(buffer, count, type, peer, tag, rank_, size_,
                                  maxTag_, INT_MAX)) {
      state.done = true;
      state.error = "mpi " + transfer.describe() + ": " + why.message();
    } else if (failure_.failed()) {
      state.done = true;
      state.error =
          "mpi " + transfer.describe() +
          " not run: the communicator failed earlier: " + failure_.message;
    } else {
      transfers_.push_back(transfer);
      transfersQueued_.store(true);
    }
    if (runningId_ == 0 && queue_.empty())
      doneThrough_ = transfer.id; // no collective is pending
  }
  workCv_.notify_one();
  return handle;
}

void MpiCommunicator::pruneTransfersLocked() {
  for (auto it = transferStates_.begin();
       it != transferStates_.end() && it->first <= doneThrough_;) {
    const TransferState &state = it->second;
    if (state.done && state.error.empty() &&
        (!failure_.failed() || it->first < failure_.failedFrom))
      it = transferStates_.erase(it);
    else
      ++it;
  }
}

Error MpiCommunicator::wait(CommHandle handle) {
  std::unique_lock<std::mutex> lock(mu_);
  if (handle.id == 0 || handle.id >= nextId_)
    return Error("mpi: wait on a handle this communicator did not issue (#" +
                 std::to_string(handle.id) + ")");
  if (transferStates_.count(handle.id)) {
    // A transfer: its own completion. Once done and successful its state
    // may be pruned; the collectives' rule below then gives success.
    auto state = [&]() -> const TransferState * {
      auto it = transferStates_.find(handle.id);
      return it == transferStates_.end() ? nullptr : &it->second;
    };
    doneCv_.wait(lock, [&] { return !state() || state()->done; });
    if (const TransferState *done = state(); done && !done->error.empty())
      return Error(done->error);
    return Error::success();
  }
  doneCv_.wait(lock, [&] { return doneThrough_ >= handle.id; });
  return failure_.resultOf(handle.id);
}

bool MpiCommunicator::test(CommHandle handle) {
  std::lock_guard<std::mutex> lock(mu_);
  if (handle.id == 0 || handle.id >= nextId_)
    return true;
  if (auto it = transferStates_.find(handle.id); it != transferStates_.end())
    return it->second.done;
  return doneThrough_ >= handle.id;
}

void MpiCommunicator::threadMain() {
#ifdef __linux__
  // Sleeps of a few microseconds should not be stretched by the default
  // 50 us timer slack.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
#endif
  Error error = setUp();
  {
    std::lock_guard<std::mutex> lock(mu_);
    setUpDone_ = true;
    setUpError_ = error;
  }
  doneCv_.notify_all();
  if (error)
    return;
  using Clock = std::chrono::steady_clock;
  // Polling while only transfers are in flight, as finish() polls.
  Clock::time_point spinUntil = Clock::now() + kSpin;
  std::chrono::microseconds sleep = kMinSleep;
  for (;;) {
    if (progressTransfers()) {
      spinUntil = Clock::now() + kSpin;
      sleep = kMinSleep;
    }
    Request request;
    bool failed;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (queue_.empty() && posted_.empty() && transfers_.empty()) {
        if (stopping_)
          break; // every issued request is done
        // Idle, the thread still answers other ranks' questions (a rank
        // that never issues the next collective is told apart from one
        // that is stopped) and looks for an abortRun.
        if (workCv_.wait_for(lock, kIdlePoll) == std::cv_status::timeout ||
            abortCode_.load() >= 0) {
          lock.unlock();
          abortIfAsked();
          answerPeers();
        }
        spinUntil = Clock::now() + kSpin;
        sleep = kMinSleep;
        continue;
      }
      if (queue_.empty()) {
        // Only transfers in flight: spin, then sleep (new work wakes it).
        if (Clock::now() < spinUntil)
          continue;
        lock.unlock();
        abortIfAsked();
        answerPeers();
        lock.lock();
        workCv_.wait_for(lock, sleep, [this] {
          return !queue_.empty() || !transfers_.empty();
        });
        sleep = std::min(sleep * 2, kMaxSleep);
        continue;
      }
      request = std::move(queue_.front());
      queue_.pop_front();
      runningId_ = request.id;
      failed = failure_.failed() && request.id >= failure_.failedFrom;
    }
    Error result;
    if (!failed && !request.invalid.empty()) {
      result = Error(request.invalid);
    } else if (!failed) {
      running_ = request.ordinal;
      runningHandle_ = request.id;
      runningSince_ = std::chrono::steady_clock::now();
      result = runCaught(request);
      running_ = runningHandle_ = 0;
    }
    finished_ = request.ordinal;
    finishedHandle_ = request.id;
    std::string abandonedBy;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (result) {
        if (abandoned_)
          abandonedBy = result.message();
        failure_.fail(request.id, result.takeMessage());
      }
      runningId_ = 0;
      doneThrough_ = firstUnstartedLocked() - 1;
      pruneTransfersLocked();
    }
    doneCv_.notify_all();
    // Past a deadline the run is to end: no transfer is waited for.
    if (!abandonedBy.empty())
      abandonTransfers(abandonedBy);
    spinUntil = Clock::now() + kSpin;
    sleep = kMinSleep;
  }
  if (!abandoned_)
    tearDown();
}

Error MpiCommunicator::setUp() {
  if (handed_ != MPI_COMM_NULL) {
    // A sub-communicator: MPI is up (the world's holds it); this thread
    // uses the split's communicator and a duplicate of it for the side
    // channel.
    comm_ = handed_;
    if (int rc = adoptComm(); rc != MPI_SUCCESS) {
      Error error("mpi: setting up a sub-communicator failed: " +
                  mpiErrorText(rc));
      tearDown();
      return error;
    }
    return Error::success();
  }
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (finalised)
    return Error("mpi: MPI was finalised in this process and cannot be "
                 "initialised again");
  int provided = MPI_THREAD_SINGLE;
  if (!initialised) {
    int rc =
        MPI_Init_thread(nullptr, nullptr, requestedThreadLevel(), &provided);
    if (rc != MPI_SUCCESS)
      return Error("mpi: MPI_Init_thread failed: " + mpiErrorText(rc));
    ownsMpi_ = true;
    provided_ = provided;
    // This thread makes every MPI call and is the one that initialised
    // MPI, which is all that FUNNELED asks.
    if (provided < MPI_THREAD_FUNNELED) {
      tearDown();
      return Error("mpi: the MPI library provides only "
                   "MPI_THREAD_SINGLE; the communication thread needs "
                   "MPI_THREAD_FUNNELED or more");
    }
  } else {
    MPI_Query_thread(&provided);
    provided_ = provided;
    if (provided < MPI_THREAD_MULTIPLE)
      return Error("mpi: MPI was initialised elsewhere without "
                   "MPI_THREAD_MULTIPLE; the communication thread "
                   "cannot share it");
  }
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
  if (rc == MPI_SUCCESS)
    rc = adoptComm();
  if (rc != MPI_SUCCESS) {
    Error error("mpi: setting up the communicator of MPI_COMM_WORLD "
                "failed: " +
                mpiErrorText(rc));
    tearDown();
    return error;
  }
  return Error::success();
}

int MpiCommunicator::adoptComm() {
  int rc = MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS) {
    // MPI_TAG_UB is at least 32767; the tags below kTransferTagBase are
    // the send-recv collective's.
    int *tagUb = nullptr, found = 0;
    rc = MPI_Comm_get_attr(comm_, MPI_TAG_UB, &tagUb, &found);
    maxTag_ = (found && tagUb ? *tagUb : 32767) - kTransferTagBase;
  }
  if (rc == MPI_SUCCESS)
    rc = MPI_Comm_dup(comm_, &side_);
  if (rc == MPI_SUCCESS)
    rc = MPI_Comm_set_errhandler(side_, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS)
    rc = MPI_Comm_rank(comm_, &rank_);
  if (rc == MPI_SUCCESS)
    rc = MPI_Comm_size(comm_, &size_);
  return rc;
}

void MpiCommunicator::tearDown() {
  if (comm_ != MPI_COMM_NULL)
    MPI_Comm_free(&comm_);
  if (side_ != MPI_COMM_NULL)
    MPI_Comm_free(&side_);
  if (ownsMpi_) {
    MPI_Finalize();
    std::lock_guard<std::mutex> lock(processMutex);
    finalisedByUs = true;
  }
}

} // namespace mpi

Expected<std::unique_ptr<Communicator>> createMpiCommunicator() {
  {
    std::lock_guard<std::mutex> lock(processMutex);
    if (communicatorExists)
      return Error("mpi: an MPI communicator already exists in this process");
    if (finalisedByUs)
      return Error("mpi: MPI was finalised in this process and cannot be "
                   "initialised again");
    communicatorExists = true;
  }
  auto comm = std::make_unique<mpi::MpiCommunicator>();
  if (Error e = comm->launch())
    return e;
  return std::unique_ptr<Communicator>(std::move(comm));
}

} // namespace kiln::runtime::comm
