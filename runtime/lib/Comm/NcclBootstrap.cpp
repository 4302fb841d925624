//===- NcclBootstrap.cpp - NCCL set-up over a host communicator, watchdog -===//
//
// Set-up. Every rank picks its GPU first, rank 0 also makes the NCCL
// unique id, and then all ranks all-gather one record each over the host
// communicator: a byte saying whether that rank is ready, and (from rank
// 0) the id. All-gathering the readiness too means a rank without a GPU
// makes every rank give up with an error line, instead of leaving the
// others blocked in the host all-gather or in ncclCommInitRank.
//
// The watchdog thread wakes every 100 ms (or a quarter of the timeout if
// that is shorter): it asks NCCL for an asynchronous error, retires the
// completed collectives, and times the oldest one in flight. Either
// trouble ends the process: one line on stderr, ncclCommAbort (given 10 s,
// it could itself hang on a broken network), _exit(1). Aborting first lets
// the peers' NCCL see the connections close rather than wait on them.
//
//===----------------------------------------------------------------------===//

#include "NcclCommunicatorImpl.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace kiln::runtime::comm {

namespace {

/// The rank on this node, from the launcher; `fallback` without one.
int localRank(int fallback) {
  for (const char *name :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"}) {
    const char *value = std::getenv(name);
    if (!value || !*value)
      continue;
    char *end = nullptr;
    long v = std::strtol(value, &end, 10);
    if (*end == '\0' && v >= 0)
      return static_cast<int>(v);
  }
  return fallback;
}

/// Picks and sets this rank's GPU; why not, if it cannot.
Error chooseDevice(int hostRank, int &device) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Error("no usable GPU: " + cudaText(err));
  }
  if (count == 0)
    return Error("no usable GPU: no CUDA device is visible");
  device = localRank(hostRank) % count;
  err = cudaSetDevice(device);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Error("no usable GPU: cannot use GPU " + std::to_string(device) +
                 ": " + cudaText(err));
  }
  return Error::success();
}

} // namespace

void NcclCommunicatorImpl::watchdogMain() {
  cudaSetDevice(device_);
  // This thread never captures; in the thread-local mode another thread's
  // global-mode capture does not forbid its event queries.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal;
  cudaThreadExchangeStreamCaptureMode(&mode);
  using namespace std::chrono;
  const bool timed = watchdogSeconds_ > 0;
  const auto timeout = duration_cast<Clock::duration>(
      duration<double>(timed ? watchdogSeconds_ : 0.0));
  auto tick = Clock::duration(milliseconds(100));
  if (timed)
    tick =
        std::max(std::min(tick, timeout / 4), Clock::duration(milliseconds(1)));
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(watchdogMu_);
      if (watchdogCv_.wait_for(lock, tick, [this] { return stopping_; }))
        return;
    }
    ncclResult_t async = ncclSuccess;
    ncclResult_t rc = ncclCommGetAsyncError(comm_, &async);
    std::string what, why;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (rc != ncclSuccess ||
          (async != ncclSuccess && async != ncclInProgress))
        why = "asynchronous error: " +
              ncclText(rc != ncclSuccess ? rc : async, comm_);
      if (why.empty() && capturingNowLocked()) {
        // No queries during a capture; its time does not count.
        oldestSince_ = Clock::now();
        continue;
      }
      if (why.empty()) {
        retireCompletedLocked();
        retireReplaysLocked();
      }
      // The oldest collective outside a graph, else the oldest replay.
      bool late = false;
      if (why.empty() && timed && !inFlight_.empty() &&
          Clock::now() - oldestSince_ > timeout) {
        late = true;
        what = inFlight_.front().what;
      } else if (why.empty() && timed && !replays_.empty() &&
                 Clock::now() - replays_.front().since > timeout) {
        late = true;
        what = replays_.front().what;
      }
      if (late) {
        char seconds[32];
        std::snprintf(seconds, sizeof seconds, "%g", watchdogSeconds_);
        why = std::string("not complete after ") + seconds +
              " s (a rank is stuck or died, or the ranks' collectives no "
              "longer match)";
      }
      if (why.empty())
        continue;
      if (what.empty())
        what = !inFlight_.empty()  ? inFlight_.front().what
               : !replays_.empty() ? replays_.front().what
                                   : "no collective in flight";
    }
    fire(what, why);
  }
}

void NcclCommunicatorImpl::fire(const std::string &what,
                                const std::string &why) {
  std::fflush(stdout);
  std::fprintf(stderr,
               "error: NCCL: %s on rank %d: %s; aborting the NCCL "
               "communicator and exiting\n",
               what.c_str(), rank_, oneLine(why).c_str());
  std::fflush(stderr);
  std::mutex mu;
  std::condition_variable cv;
  bool aborted = false;
  ncclComm_t comm = comm_;
  std::thread aborter([&] {
    ncclCommAbort(comm);
    std::lock_guard<std::mutex> lock(mu);
    aborted = true;
    cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(10), [&] { return aborted; });
  }
  _exit(1); // the aborter thread may still be inside NCCL: no destructors
}

Expected<std::unique_ptr<NcclCommunicator>>
createNcclCommunicator(std::unique_ptr<Communicator> bootstrap,
                       double watchdogSeconds) {
  if (!bootstrap)
    return Error("nccl: no bootstrap communicator");
  const int rank = bootstrap->rank(), size = bootstrap->size();
  int device = 0;
  Error why = chooseDevice(rank, device);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (!why && rank == 0)
    if (ncclResult_t rc = ncclGetUniqueId(&id); rc != ncclSuccess)
      why = Error("ncclGetUniqueId failed: " + ncclText(rc, nullptr));

  // One record per rank: [ready][unique id].
  const int64_t recordBytes = 1 + sizeof(ncclUniqueId);
  std::vector<unsigned char> mine(recordBytes), all(size * recordBytes);
  mine[0] = why ? 0 : 1;
  std::memcpy(mine.data() + 1, &id, sizeof id);
  if (Error failed = bootstrap->wait(bootstrap->startAllGather(
          mine.data(), all.data(), recordBytes, ElementType::U8)))
    return Error("nccl: sharing the NCCL unique id over the " +
                 std::string(bootstrap->backendName()) +
                 " communicator failed: " + failed.message());
  std::string notReady;
  for (int r = 0; r < size; ++r)
    if (!all[r * recordBytes])
      notReady += (notReady.empty() ? "" : ", ") + std::to_string(r);
  if (why || !notReady.empty())
    return Error("nccl: rank " + std::to_string(rank) + ": " +
                 (why ? why.message()
                      : "rank(s) " + notReady + " could not set up a GPU"));
  std::memcpy(&id, all.data() + 1, sizeof id);

  auto comm = std::make_unique<NcclCommunicatorImpl>(std::move(bootstrap),
                                                     device, watchdogSeconds);
  ncclComm_t nccl = nullptr;
  if (ncclResult_t rc = ncclCommInitRank(&nccl, size, id, rank);
      rc != ncclSuccess)
    return Error("nccl: ncclCommInitRank on rank " + std::to_string(rank) +
                 " (GPU " + std::to_string(device) +
                 ") failed: " + ncclText(rc, nccl));
  if (Error failed = comm->setUp(nccl))
    return failed;
  return std::unique_ptr<NcclCommunicator>(std::move(comm));
}

Expected<std::unique_ptr<Communicator>> NcclCommunicatorImpl::split(int color,
                                                                    int key) {
  if (color < 0)
    return Error("nccl: split needs a color of 0 or more, got " +
                 std::to_string(color));
  // The host communicator first, so that the new one's host() holds the
  // same ranks; then NCCL's, which blocks until every rank of this
  // communicator has called it. Under issueMu_: a split takes its place in
  // the issue order like a collective.
  Expected<std::unique_ptr<Communicator>> host = host_->split(color, key);
  if (!host)
    return Error("nccl: splitting the host communicator: " +
                 host.error().message());
  DeviceGuard guard(device_);
  ncclComm_t made = nullptr;
  {
    std::lock_guard<std::mutex> lock(issueMu_);
    if (ncclResult_t rc = ncclCommSplit(comm_, color, key, &made, nullptr);
        rc != ncclSuccess)
      return Error("nccl: ncclCommSplit on rank " + std::to_string(rank_) +
                   " failed: " + ncclText(rc, comm_));
  }
  auto child = std::make_unique<NcclCommunicatorImpl>(std::move(*host), device_,
                                                      watchdogSeconds_);
  if (Error failed = child->setUp(made))
    return failed;
  return std::unique_ptr<Communicator>(std::move(child));
}

namespace {
/// A communicator someone else owns, seen through a unique_ptr: what the
/// non-owning createNcclCommunicator hands to the owning one. Its split is
/// the owner's (a new communicator, owned by whoever asked), which is what
/// NcclCommunicatorImpl::split needs of its host communicator.
class BorrowedCommunicator final : public Communicator {
public:
  explicit BorrowedCommunicator(Communicator &c) : c(c) {}
  int rank() const override { return c.rank(); }
  int size() const override { return c.size(); }
  const char *backendName() const override { return c.backendName(); }
  CommHandle startAllGather(const void *send, void *recv, int64_t count,
                            ElementType type) override {
    return c.startAllGather(send, recv, count, type);
  }
  CommHandle startReduceScatter(const void *send, void *recv, int64_t count,
                                ElementType type, ReduceOp op) override {
    return c.startReduceScatter(send, recv, count, type, op);
  }
  CommHandle startAllReduce(const void *send, void *recv, int64_t count,
                            ElementType type, ReduceOp op) override {
    return c.startAllReduce(send, recv, count, type, op);
  }
  CommHandle startSendRecv(const void *send, void *recv, int64_t count,
                           ElementType type, int shift) override {
    return c.startSendRecv(send, recv, count, type, shift);
  }
  CommHandle startSend(const void *send, int64_t count, ElementType type,
                       int peer, int tag) override {
    return c.startSend(send, count, type, peer, tag);
  }
  CommHandle startRecv(void *recv, int64_t count, ElementType type, int peer,
                       int tag) override {
    return c.startRecv(recv, count, type, peer, tag);
  }
  int maxTag() const override { return c.maxTag(); }
  Error wait(CommHandle h) override { return c.wait(h); }
  bool test(CommHandle h) override { return c.test(h); }
  Error barrier() override { return c.barrier(); }
  Error failure() const override { return c.failure(); }
  bool exactRingOrderReduction() const override {
    return c.exactRingOrderReduction();
  }
  Expected<std::unique_ptr<Communicator>> split(int color, int key) override {
    return c.split(color, key);
  }

private:
  Communicator &c;
};
} // namespace

Expected<std::unique_ptr<NcclCommunicator>>
createNcclCommunicator(Communicator &bootstrap, double watchdogSeconds) {
  return createNcclCommunicator(
      std::make_unique<BorrowedCommunicator>(bootstrap), watchdogSeconds);
}

} // namespace kiln::runtime::comm
