//===- MpiCommunicator.cpp - Collectives over MPI, one progress thread ----===//
//
// Threads. The caller's threads only touch the request queue under `mu_`.
// The communication thread makes every MPI call: MPI_Init_thread, the
// collectives, MPI_Finalize. It takes requests in issue order and runs each
// to completion with non-blocking MPI calls it polls (MPI_Test): tight
// polling for a short while, then sleeps that double up to a cap, so that a
// rank whose peers are late leaves its core to the compute thread instead
// of spinning in MPI (ranks are oversubscribed on small machines). Between
// requests it sleeps on `workCv_`. Completing request k sets doneThrough_
// = k and wakes the waiters; requests finish one after the other, which is
// what makes completion follow issue order.
//
// Data movement and arithmetic are separate: MPI only moves bytes
// (MPI_FLOAT, MPI_UINT16_T; MPI's own reductions are never used, their
// order is the library's choice), and the communication thread reduces
// the gathered rows with reduceRows in rank order.
//   all-gather      MPI_Iallgather.
//   reduce-scatter  MPI_Ialltoall gathers the N contributions to this
//                   rank's chunk as N rows, then reduceRows.
//   all-reduce      the count elements are cut into N near-equal chunks
//                   (the first count % N one element longer); chunk j is
//                   reduced by rank j as above (MPI_Ialltoallv), and the
//                   reduced chunks are shared with MPI_Iallgatherv. Every
//                   element is reduced once, by one rank, so all ranks
//                   receive the same bits.
//   barrier         MPI_Ibarrier.
// Counts of zero complete without MPI calls (every rank skips them alike).
//
// Deadline (setTimeout). MPI cannot say which ranks have joined a
// collective, so the ranks keep a side channel, a second duplicate of
// MPI_COMM_WORLD: the communication thread answers "which collective have
// you reached?" whenever it polls, and every 100 ms while idle. When a
// collective passes its deadline the thread asks every other rank, waits 2 s
// for the answers, fails the collective with a line naming the ranks that
// had not reached it (those that did not answer are stopped or hung), and
// leaves the MPI request pending: a collective cannot be cancelled, so the
// communicator is never finalised after that and the run ends by abortRun
// (MPI_Abort, made by this thread, so FUNNELED still suffices).
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Comm/MpiCommunicator.h"

#include "Collective.h"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#ifdef __linux__
#include <sys/prctl.h>
#endif

namespace kiln::runtime::comm {

namespace {

// Polling: MPI_Test back to back for kSpin, then sleeps from kMinSleep
// doubling to kMaxSleep.
constexpr std::chrono::microseconds kSpin{50};
constexpr std::chrono::microseconds kMinSleep{2};
constexpr std::chrono::microseconds kMaxSleep{200};
// The side channel: how often an idle thread looks for questions, how long
// a rank whose collective passed its deadline waits for the answers.
constexpr std::chrono::milliseconds kIdlePoll{100};
constexpr std::chrono::seconds kAnswerGrace{2};
constexpr int kAskTag = 1, kAnswerTag = 2;

/// MPI may be initialised once per process; these track who holds it.
std::mutex processMutex;
bool communicatorExists = false;
bool finalisedByUs = false;

struct Request {
  uint64_t id = 0;
  CollectiveKind kind = CollectiveKind::Barrier;
  ElementType type = ElementType::F32;
  ReduceOp op = ReduceOp::Sum;
  const void *send = nullptr;
  void *recv = nullptr;
  int64_t count = 0;
  /// Set at start when the arguments are invalid: the request fails
  /// (in its turn) without MPI calls.
  std::string invalid;
};

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

class MpiCommunicator final : public Communicator {
public:
  ~MpiCommunicator() override;

  /// Starts the communication thread and waits for it to set MPI up.
  std::optional<std::string> launch();

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char *backendName() const override { return "mpi"; }

  CommHandle startAllGather(const void *send, void *recv, int64_t count,
                            ElementType type) override {
    return enqueue(CollectiveKind::AllGather, send, recv, count, type,
                   ReduceOp::Sum);
  }
  CommHandle startReduceScatter(const void *send, void *recv, int64_t count,
                                ElementType type, ReduceOp op) override {
    return enqueue(CollectiveKind::ReduceScatter, send, recv, count, type, op);
  }
  CommHandle startAllReduce(const void *send, void *recv, int64_t count,
                            ElementType type, ReduceOp op) override {
    return enqueue(CollectiveKind::AllReduce, send, recv, count, type, op);
  }

  std::optional<std::string> wait(CommHandle handle) override;
  bool test(CommHandle handle) override;

  std::optional<std::string> barrier() override {
    return wait(enqueue(CollectiveKind::Barrier, nullptr, nullptr, 0,
                        ElementType::F32, ReduceOp::Sum));
  }

  std::optional<std::string> failure() const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.failed())
      return std::nullopt;
    return failure_.message;
  }

  void setTimeout(int64_t seconds) override {
    timeoutSeconds_.store(std::max<int64_t>(0, seconds));
  }
  [[noreturn]] void abortRun(int code) override;

private:
  CommHandle enqueue(CollectiveKind kind, const void *send, void *recv,
                     int64_t count, ElementType type, ReduceOp op);

  // On the communication thread only.
  void threadMain();
  std::optional<std::string> setUp();
  void tearDown();
  std::optional<std::string> runCaught(const Request &request);
  std::optional<std::string> run(const Request &request);
  std::optional<std::string> finish(MPI_Request &request, const char *call);
  std::optional<std::string> allReduce(const Request &request);
  void answerPeers();
  std::string missingRanks();
  void abortIfAsked();

  // Shared, guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable workCv_; // a request was queued, or stopping_
  std::condition_variable doneCv_; // doneThrough_ moved, or set-up ended
  std::deque<Request> queue_;
  uint64_t nextId_ = 1;      // the id the next start call gets
  uint64_t doneThrough_ = 0; // every request with id <= this is complete
  FailureState failure_;
  bool stopping_ = false;
  bool setUpDone_ = false;
  std::optional<std::string> setUpError_;

  // Written by the communication thread before set-up ends, then constant.
  int rank_ = 0, size_ = 1;

  // Set by any thread, read by the communication thread.
  std::atomic<int64_t> timeoutSeconds_{0};
  std::atomic<int> abortCode_{-1};

  // The communication thread's own.
  std::thread thread_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm side_ = MPI_COMM_NULL; // questions and answers about progress
  uint64_t running_ = 0;          // the request in MPI now, else 0
  uint64_t finished_ = 0;         // the last request this thread completed
  std::chrono::steady_clock::time_point runningSince_;
  // A request left pending when its deadline passed: MPI may still write
  // to its buffers, so MPI is not finalised and the run ends by abortRun.
  bool abandoned_ = false;
  // Buffers of the side channel's messages; they stay put, since sends and
  // receives of a timed-out ask may never complete.
  std::deque<int64_t> answers_;
  int64_t asked_ = 0;
  std::vector<int64_t> peerReached_;
  bool ownsMpi_ = false;
  std::vector<unsigned char> rows_;
  std::vector<float> scratch_;
  std::vector<int> sendCounts_, sendDispls_, recvCounts_, recvDispls_;
};

std::optional<std::string> MpiCommunicator::launch() {
  try {
    thread_ = std::thread([this] { threadMain(); });
  } catch (const std::exception &e) {
    return std::string("mpi: cannot start the communication thread: ") +
           e.what();
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
  std::lock_guard<std::mutex> lock(processMutex);
  communicatorExists = false;
}

CommHandle MpiCommunicator::enqueue(CollectiveKind kind, const void *send,
                                    void *recv, int64_t count, ElementType type,
                                    ReduceOp op) {
  Request request;
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
    if (auto why =
            checkCollective(kind, send, recv, count, type, op, size_, INT_MAX))
      request.invalid = "mpi " +
                        describeCollective(kind, request.id, count, type, op) +
                        ": " + *why;
    queue_.push_back(std::move(request));
  }
  workCv_.notify_one();
  return handle;
}

std::optional<std::string> MpiCommunicator::wait(CommHandle handle) {
  std::unique_lock<std::mutex> lock(mu_);
  if (handle.id == 0 || handle.id >= nextId_)
    return "mpi: wait on a handle this communicator did not issue (#" +
           std::to_string(handle.id) + ")";
  doneCv_.wait(lock, [&] { return doneThrough_ >= handle.id; });
  return failure_.resultOf(handle.id);
}

bool MpiCommunicator::test(CommHandle handle) {
  std::lock_guard<std::mutex> lock(mu_);
  return handle.id == 0 || handle.id >= nextId_ || doneThrough_ >= handle.id;
}

void MpiCommunicator::threadMain() {
#ifdef __linux__
  // Sleeps of a few microseconds should not be stretched by the default
  // 50 us timer slack.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
#endif
  std::optional<std::string> error = setUp();
  {
    std::lock_guard<std::mutex> lock(mu_);
    setUpDone_ = true;
    setUpError_ = error;
  }
  doneCv_.notify_all();
  if (error)
    return;
  for (;;) {
    Request request;
    bool failed;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Idle, the thread still answers other ranks' questions (a rank
      // that never issues the next collective is told apart from one that
      // is stopped) and looks for an abortRun.
      while (!stopping_ && queue_.empty()) {
        if (workCv_.wait_for(lock, kIdlePoll) == std::cv_status::timeout ||
            abortCode_.load() >= 0) {
          lock.unlock();
          abortIfAsked();
          answerPeers();
          lock.lock();
        }
      }
      if (queue_.empty())
        break; // stopping, and every issued request is done
      request = std::move(queue_.front());
      queue_.pop_front();
      failed = failure_.failed();
    }
    std::optional<std::string> result;
    if (!failed && !request.invalid.empty()) {
      result = request.invalid;
    } else if (!failed) {
      running_ = request.id;
      runningSince_ = std::chrono::steady_clock::now();
      result = runCaught(request);
      running_ = 0;
    }
    finished_ = request.id;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (result)
        failure_.fail(request.id, *result);
      doneThrough_ = request.id;
    }
    doneCv_.notify_all();
  }
  if (!abandoned_)
    tearDown();
}

std::optional<std::string> MpiCommunicator::setUp() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (finalised)
    return std::string("mpi: MPI was finalised in this process and cannot be "
                       "initialised again");
  int provided = MPI_THREAD_SINGLE;
  if (!initialised) {
    int rc =
        MPI_Init_thread(nullptr, nullptr, requestedThreadLevel(), &provided);
    if (rc != MPI_SUCCESS)
      return "mpi: MPI_Init_thread failed: " + mpiErrorText(rc);
    ownsMpi_ = true;
    // This thread makes every MPI call and is the one that initialised
    // MPI, which is all that FUNNELED asks.
    if (provided < MPI_THREAD_FUNNELED) {
      tearDown();
      return std::string("mpi: the MPI library provides only "
                         "MPI_THREAD_SINGLE; the communication thread needs "
                         "MPI_THREAD_FUNNELED or more");
    }
  } else {
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE)
      return std::string("mpi: MPI was initialised elsewhere without "
                         "MPI_THREAD_MULTIPLE; the communication thread "
                         "cannot share it");
  }
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
  if (rc == MPI_SUCCESS)
    rc = MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS)
    rc = MPI_Comm_dup(MPI_COMM_WORLD, &side_);
  if (rc == MPI_SUCCESS)
    rc = MPI_Comm_set_errhandler(side_, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS)
    rc = MPI_Comm_rank(comm_, &rank_);
  if (rc == MPI_SUCCESS)
    rc = MPI_Comm_size(comm_, &size_);
  if (rc != MPI_SUCCESS) {
    std::string error = "mpi: setting up the communicator of MPI_COMM_WORLD "
                        "failed: " +
                        mpiErrorText(rc);
    tearDown();
    return error;
  }
  return std::nullopt;
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

std::optional<std::string> MpiCommunicator::finish(MPI_Request &request,
                                                   const char *call) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point spinUntil = Clock::now() + kSpin;
  std::chrono::microseconds sleep = kMinSleep;
  for (;;) {
    int done = 0;
    int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
      return std::string(call) + " failed: " + mpiErrorText(rc);
    if (done)
      return std::nullopt;
    Clock::time_point now = Clock::now();
    if (now < spinUntil)
      continue;
    abortIfAsked();
    answerPeers();
    int64_t timeout = timeoutSeconds_.load();
    if (timeout > 0 && now - runningSince_ >= std::chrono::seconds(timeout)) {
      abandoned_ = true;
      return "not complete after " + std::to_string(timeout) +
             " s (the deadline, comm.train_timeout_seconds); " +
             missingRanks();
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, kMaxSleep);
  }
}

void MpiCommunicator::answerPeers() {
  for (;;) {
    int asked = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kAskTag, side_, &asked, &status) !=
            MPI_SUCCESS ||
        !asked)
      return;
    int64_t question = 0;
    if (MPI_Recv(&question, 1, MPI_INT64_T, status.MPI_SOURCE, kAskTag, side_,
                 MPI_STATUS_IGNORE) != MPI_SUCCESS)
      return;
    // The collective this rank has reached: the one in MPI now, else the
    // last one done (its successor is not issued yet).
    answers_.push_back(static_cast<int64_t>(running_ ? running_ : finished_));
    MPI_Request sent;
    if (MPI_Isend(&answers_.back(), 1, MPI_INT64_T, status.MPI_SOURCE,
                  kAnswerTag, side_, &sent) == MPI_SUCCESS)
      MPI_Request_free(&sent);
  }
}

std::string MpiCommunicator::missingRanks() {
  using Clock = std::chrono::steady_clock;
  asked_ = static_cast<int64_t>(running_);
  peerReached_.assign(size_, -1);
  std::vector<MPI_Request> answers(size_, MPI_REQUEST_NULL);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_)
      continue;
    MPI_Request sent;
    if (MPI_Irecv(&peerReached_[r], 1, MPI_INT64_T, r, kAnswerTag, side_,
                  &answers[r]) != MPI_SUCCESS ||
        MPI_Isend(&asked_, 1, MPI_INT64_T, r, kAskTag, side_, &sent) !=
            MPI_SUCCESS)
      continue;
    MPI_Request_free(&sent);
  }
  // Other ranks waiting on this collective ask too: keep answering.
  Clock::time_point until = Clock::now() + kAnswerGrace;
  for (int pending = size_ - 1; pending > 0 && Clock::now() < until;) {
    answerPeers();
    pending = 0;
    for (int r = 0; r < size_; ++r) {
      int done = 1;
      if (answers[r] != MPI_REQUEST_NULL &&
          MPI_Test(&answers[r], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        done = 0;
      pending += done ? 0 : 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::string missing;
  for (int r = 0; r < size_; ++r) {
    std::string why;
    if (r == rank_)
      continue;
    if (answers[r] != MPI_REQUEST_NULL)
      why = "no answer within " + std::to_string(kAnswerGrace.count()) +
            " s: stopped or hung";
    else if (peerReached_[r] < asked_)
      why = peerReached_[r] == 0
                ? "alive, no collective issued yet"
                : "alive, its latest collective is #" +
                      std::to_string(peerReached_[r]);
    else
      continue;
    missing += (missing.empty() ? "" : ", ") + std::string("rank ") +
               std::to_string(r) + " (" + why + ")";
  }
  if (missing.empty())
    return "every rank reached it: MPI itself is stuck";
  return "did not arrive: " + missing;
}

void MpiCommunicator::abortIfAsked() {
  int code = abortCode_.load();
  if (code >= 0)
    MPI_Abort(MPI_COMM_WORLD, code);
}

void MpiCommunicator::abortRun(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  abortCode_.store(std::max(code, 0));
  workCv_.notify_one();
  // The communication thread calls MPI_Abort within its next poll; should
  // it be unable to, this process at least ends.
  std::this_thread::sleep_for(std::chrono::seconds(10));
  std::_Exit(code);
}

std::optional<std::string> MpiCommunicator::runCaught(const Request &r) {
  // Nothing may escape this thread: scratch space that cannot be had is
  // the collective's error.
  try {
    return run(r);
  } catch (const std::exception &e) {
    return "mpi " + describeCollective(r.kind, r.id, r.count, r.type, r.op) +
           ": " + e.what();
  }
}

std::optional<std::string> MpiCommunicator::run(const Request &r) {
  std::optional<std::string> error;
  if (r.kind == CollectiveKind::Barrier) {
    MPI_Request request;
    int rc = MPI_Ibarrier(comm_, &request);
    error = rc != MPI_SUCCESS
                ? std::optional("MPI_Ibarrier failed: " + mpiErrorText(rc))
                : finish(request, "MPI_Ibarrier");
  } else if (r.count == 0) {
    return std::nullopt;
  } else if (r.kind == CollectiveKind::AllGather) {
    MPI_Request request;
    int count = static_cast<int>(r.count);
    int rc = MPI_Iallgather(r.send, count, mpiType(r.type), r.recv, count,
                            mpiType(r.type), comm_, &request);
    error = rc != MPI_SUCCESS
                ? std::optional("MPI_Iallgather failed: " + mpiErrorText(rc))
                : finish(request, "MPI_Iallgather");
  } else if (r.kind == CollectiveKind::ReduceScatter) {
    // Row j of rows_ = rank j's contribution to this rank's chunk.
    rows_.resize(static_cast<size_t>(size_) * r.count * elementBytes(r.type));
    MPI_Request request;
    int count = static_cast<int>(r.count);
    int rc = MPI_Ialltoall(r.send, count, mpiType(r.type), rows_.data(), count,
                           mpiType(r.type), comm_, &request);
    error = rc != MPI_SUCCESS
                ? std::optional("MPI_Ialltoall failed: " + mpiErrorText(rc))
                : finish(request, "MPI_Ialltoall");
    if (!error)
      reduceRows(rows_.data(), size_, r.count, r.type, r.op, r.recv, scratch_);
  } else {
    error = allReduce(r);
  }
  if (!error)
    return std::nullopt;
  return "mpi " + describeCollective(r.kind, r.id, r.count, r.type, r.op) +
         ": " + *error;
}

std::optional<std::string> MpiCommunicator::allReduce(const Request &r) {
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
    return "MPI_Ialltoallv failed: " + mpiErrorText(rc);
  if (auto error = finish(request, "MPI_Ialltoallv"))
    return error;
  // The send buffer is no longer read, so with send == recv the reduced
  // chunk may go straight to its place in recv.
  void *chunk = static_cast<unsigned char *>(r.recv) + offsets[rank_] * bytes;
  reduceRows(rows_.data(), n, mine, r.type, r.op, chunk, scratch_);
  rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, r.recv,
                       lengths.data(), offsets.data(), type, comm_, &request);
  if (rc != MPI_SUCCESS)
    return "MPI_Iallgatherv failed: " + mpiErrorText(rc);
  return finish(request, "MPI_Iallgatherv");
}

} // namespace

std::unique_ptr<Communicator> createMpiCommunicator(std::string &error) {
  {
    std::lock_guard<std::mutex> lock(processMutex);
    if (communicatorExists) {
      error = "mpi: an MPI communicator already exists in this process";
      return nullptr;
    }
    if (finalisedByUs) {
      error = "mpi: MPI was finalised in this process and cannot be "
              "initialised again";
      return nullptr;
    }
    communicatorExists = true;
  }
  auto comm = std::make_unique<MpiCommunicator>();
  if (auto why = comm->launch()) {
    error = *why;
    return nullptr;
  }
  return comm;
}

} // namespace kiln::runtime::comm
