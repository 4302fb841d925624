//===- NcclCommunicator.cpp - Collectives over NCCL, a stream and events --===//
//
// Threads and locks. `issueMu_` makes a start call one step: number the
// handle, join the producer stream, enqueue the NCCL call, record the
// completion event; so the issue order (what matches collectives across
// ranks) is the order of the NCCL calls even with several calling threads.
// `mu_` guards what test(), wait(), streamWait() and the watchdog share:
// the records of the collectives in flight, the event pool, the failed
// state. No call under `mu_` blocks (cudaEventQuery only); wait() polls
// with the lock released, spinning briefly and then sleeping 2 us doubling
// to 200 us, like the MPI backend's progress thread.
//
// Completion. Every collective, including one skipped because of bad
// arguments or an earlier failure, records an event on the communicator's
// stream after its NCCL call (or in its place), so events complete in
// issue order; when one is seen complete, every record up to it is retired
// (its event goes back to the pool) and doneThrough_ moves up to it.
// Counts of zero make no NCCL call (every rank skips them alike).
// Point-to-point transfers are not built: issueTransfer only numbers the
// handle and keeps its error line (transferErrors_), which wait(), test()
// and streamWait() answer first.
//
// Capture. A collective is captured when the communicator's stream is
// capturing once it has waited for the producer's event. Its event is
// kept apart (captureEvents_) for streamWait() during that capture and
// pooled again at the first collective issued outside a capture; its id
// is remembered in capturedRanges_ so test() and wait() can answer
// without touching events. Nothing queries an event while the producer
// or the communicator's stream is capturing; the watchdog thread runs in
// the thread-local capture mode, so its queries of earlier events do not
// count against another thread's global-mode capture (what broke PyTorch's
// NCCL watchdog: pytorch/pytorch#104555).
//
//===----------------------------------------------------------------------===//

#include "NcclCommunicatorImpl.h"

#include <algorithm>
#include <exception>
#include <iterator>
#include <limits>

namespace kiln::runtime::comm {

namespace {

constexpr std::chrono::microseconds kSpin{50};
constexpr std::chrono::microseconds kMinSleep{2};
constexpr std::chrono::microseconds kMaxSleep{200};
/// Events made up front; the pool grows when more are in flight at once.
constexpr int kInitialEvents = 64;

ncclDataType_t ncclType(ElementType type) {
  switch (type) {
  case ElementType::BF16:
    return ncclBfloat16;
  case ElementType::U8:
    return ncclUint8;
  default:
    return ncclFloat32;
  }
}

ncclRedOp_t ncclOp(ReduceOp op) {
  return op == ReduceOp::Max ? ncclMax : ncclSum;
}

} // namespace

std::string oneLine(std::string text) {
  for (char &c : text)
    if (c == '\n' || c == '\r')
      c = ' ';
  while (!text.empty() && text.back() == ' ')
    text.pop_back();
  return text;
}

std::string cudaText(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
}

std::string ncclText(ncclResult_t rc, ncclComm_t comm) {
  std::string text = ncclGetErrorString(rc);
  const char *last = ncclGetLastError(comm);
  if (last && *last)
    text += std::string(" (") + last + ")";
  return oneLine(text);
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    cudaGetLastError(); // not a sticky error: clear it
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

DeviceGuard::DeviceGuard(int device) {
  if (cudaGetDevice(&previous_) != cudaSuccess || previous_ == device) {
    previous_ = -1;
    return;
  }
  cudaSetDevice(device);
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0)
    cudaSetDevice(previous_);
}

NcclCommunicatorImpl::~NcclCommunicatorImpl() {
  DeviceGuard guard(device_);
  // Complete what was issued (the watchdog still runs, so a peer that
  // never joins ends the process instead of hanging it here). A stream
  // still in a capture has nothing that runs before the graph does.
  if (stream_ && !capturing(stream_))
    cudaStreamSynchronize(stream_);
  {
    std::lock_guard<std::mutex> lock(watchdogMu_);
    stopping_ = true;
  }
  watchdogCv_.notify_all();
  if (watchdog_.joinable())
    watchdog_.join();
  if (comm_) {
    // After an NCCL or CUDA error the communicator may not be able to
    // flush; abort frees it without waiting on the peers.
    if (!ncclBroken_ && ncclCommFinalize(comm_) == ncclSuccess)
      ncclCommDestroy(comm_);
    else
      ncclCommAbort(comm_);
  }
  for (Pending &p : inFlight_)
    if (p.done)
      pool_.push_back(p.done);
  for (auto &[id, event] : captureEvents_)
    pool_.push_back(event);
  for (Replay &r : replays_)
    pool_.push_back(r.done);
  for (cudaEvent_t event : pool_)
    cudaEventDestroy(event);
  if (joinEvent_)
    cudaEventDestroy(joinEvent_);
  if (barrierBuffer_)
    cudaFree(barrierBuffer_);
  if (stream_)
    cudaStreamDestroy(stream_);
}

Error NcclCommunicatorImpl::setUp(ncclComm_t comm) {
  comm_ = comm;
  cudaError_t err = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
  if (err == cudaSuccess)
    err = cudaEventCreateWithFlags(&joinEvent_, cudaEventDisableTiming);
  if (err == cudaSuccess)
    err = cudaMalloc(&barrierBuffer_, sizeof(float));
  if (err == cudaSuccess)
    err = cudaMemsetAsync(barrierBuffer_, 0, sizeof(float), stream_);
  if (err == cudaSuccess)
    err = cudaStreamSynchronize(stream_);
  for (int i = 0; err == cudaSuccess && i < kInitialEvents; ++i) {
    cudaEvent_t event;
    err = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (err == cudaSuccess)
      pool_.push_back(event);
  }
  if (err != cudaSuccess)
    return Error("nccl: setting up the stream and events on GPU " +
                 std::to_string(device_) + " failed: " + cudaText(err));
  try {
    watchdog_ = std::thread([this] { watchdogMain(); });
  } catch (const std::exception &e) {
    return Error(std::string("nccl: cannot start the watchdog thread: ") +
                 e.what());
  }
  return Error::success();
}

CommHandle NcclCommunicatorImpl::issue(CollectiveKind kind, const void *send,
                                       void *recv, int64_t count,
                                       ElementType type, ReduceOp op,
                                       int shift) {
  std::lock_guard<std::mutex> issueLock(issueMu_);
  DeviceGuard guard(device_);
  uint64_t id;
  bool failedBefore;
  cudaStream_t producer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = nextId_++;
    failedBefore = failure_.failed();
    producer = producer_;
  }
  std::string what = describeCollective(kind, id, count, type, op);
  std::string error;
  if (!failedBefore)
    if (Error why = checkCollective(kind, send, recv, count, type, op, size_,
                                    std::numeric_limits<int64_t>::max(), shift))
      error = "nccl " + what + ": " + why.message();

  // The join: the communicator's stream waits for the producer's work.
  // Done even for a collective that will not run, so that its event, and
  // everything waiting on it, still comes after that work.
  std::string cudaError;
  cudaError_t err = cudaEventRecord(joinEvent_, producer);
  if (err == cudaSuccess)
    err = cudaStreamWaitEvent(stream_, joinEvent_, 0);
  if (err != cudaSuccess)
    cudaError = "joining the producer stream: " + cudaText(err);
  bool captured = capturing(stream_);

  bool broken = false;
  if (!failedBefore && error.empty() && cudaError.empty()) {
    ncclResult_t rc = ncclSuccess;
    const char *call = nullptr;
    if (kind == CollectiveKind::Barrier) {
      call = "ncclAllReduce";
      rc = ncclAllReduce(barrierBuffer_, barrierBuffer_, 1, ncclFloat32,
                         ncclSum, comm_, stream_);
    } else if (count > 0 && kind == CollectiveKind::AllGather) {
      call = "ncclAllGather";
      rc = ncclAllGather(send, recv, static_cast<size_t>(count), ncclType(type),
                         comm_, stream_);
    } else if (count > 0 && kind == CollectiveKind::SendRecv) {
      // One ring step: both calls in one group, so neither waits for the
      // other (shift 0: a copy on the stream).
      if (shift == 0) {
        call = "cudaMemcpyAsync";
        if (cudaMemcpyAsync(recv, send, count * elementBytes(type),
                            cudaMemcpyDeviceToDevice, stream_) != cudaSuccess)
          rc = ncclUnhandledCudaError;
      } else {
        call = "ncclSend/ncclRecv";
        int to = (rank_ + shift) % size_,
            from = (rank_ - shift + size_) % size_;
        rc = ncclGroupStart();
        if (rc == ncclSuccess)
          rc = ncclSend(send, static_cast<size_t>(count), ncclType(type), to,
                        comm_, stream_);
        if (rc == ncclSuccess)
          rc = ncclRecv(recv, static_cast<size_t>(count), ncclType(type), from,
                        comm_, stream_);
        ncclResult_t end = ncclGroupEnd();
        if (rc == ncclSuccess)
          rc = end;
      }
    } else if (count > 0 && kind == CollectiveKind::ReduceScatter) {
      call = "ncclReduceScatter";
      rc = ncclReduceScatter(send, recv, static_cast<size_t>(count),
                             ncclType(type), ncclOp(op), comm_, stream_);
    } else if (count > 0) {
      call = "ncclAllReduce";
      rc = ncclAllReduce(send, recv, static_cast<size_t>(count), ncclType(type),
                         ncclOp(op), comm_, stream_);
    }
    if (rc != ncclSuccess) {
      error = "nccl " + what + ": " + call + " failed: " + ncclText(rc, comm_);
      broken = true;
    }
  }
  if (!cudaError.empty()) {
    error = "nccl " + what + ": " + cudaError;
    broken = true;
  }

  std::lock_guard<std::mutex> lock(mu_);
  cudaEvent_t done = takeEventLocked();
  if (done) {
    err = cudaEventRecord(done, stream_);
    if (err != cudaSuccess) {
      pool_.push_back(done);
      done = nullptr;
      if (error.empty())
        error = "nccl " + what + ": recording its event: " + cudaText(err);
      broken = true;
    }
  } else if (error.empty()) {
    error = "nccl " + what + ": cannot create an event";
    broken = true;
  }
  if (!error.empty() && !failedBefore)
    failure_.fail(id, error);
  ncclBroken_ = ncclBroken_ || broken;
  if (captured) {
    if (!capturedRanges_.empty() && capturedRanges_.back().second + 1 == id)
      capturedRanges_.back().second = id;
    else
      capturedRanges_.push_back({id, id});
    if (done)
      captureEvents_[id] = done;
    return {id};
  }
  // Outside a capture: any capture before this one has ended.
  for (auto &[capturedId, event] : captureEvents_)
    pool_.push_back(event);
  captureEvents_.clear();
  if (inFlight_.empty())
    oldestSince_ = Clock::now();
  inFlight_.push_back({id, done, std::move(what)});
  // So that records and events do not pile up when the caller relies on
  // streamWait() alone: retire what is complete at the front.
  if (!capturing(producer))
    retireCompletedLocked();
  return {id};
}

CommHandle NcclCommunicatorImpl::issueTransfer(bool send, void *buffer,
                                               int64_t count, ElementType type,
                                               int peer, int tag) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id = nextId_++;
  Error why = checkTransfer(buffer, count, type, peer, tag, rank_, size_,
                            maxTag(), std::numeric_limits<int64_t>::max());
  transferErrors_[id] =
      why ? "nccl " + describeTransfer(send, id, count, type, peer, tag) +
                ": " + why.message()
          : "nccl: point-to-point transfers (pipeline parallel) are not "
            "implemented yet";
  return {id};
}

cudaEvent_t NcclCommunicatorImpl::takeEventLocked() {
  if (!pool_.empty()) {
    cudaEvent_t event = pool_.back();
    pool_.pop_back();
    return event;
  }
  cudaEvent_t event = nullptr;
  if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess)
    return nullptr;
  return event;
}

bool NcclCommunicatorImpl::isCapturedLocked(uint64_t id) const {
  auto it =
      std::upper_bound(capturedRanges_.begin(), capturedRanges_.end(), id,
                       [](uint64_t x, const std::pair<uint64_t, uint64_t> &r) {
                         return x < r.first;
                       });
  return it != capturedRanges_.begin() && std::prev(it)->second >= id;
}

bool NcclCommunicatorImpl::capturingNowLocked() const {
  return capturing(stream_) || capturing(producer_);
}

bool NcclCommunicatorImpl::retireLocked(uint64_t target) {
  // The newest record at or before `target` whose event was recorded:
  // when it is complete, so is everything before it on the stream.
  auto end =
      std::upper_bound(inFlight_.begin(), inFlight_.end(), target,
                       [](uint64_t x, const Pending &p) { return x < p.id; });
  auto probe = end;
  while (probe != inFlight_.begin() && !std::prev(probe)->done)
    --probe;
  if (probe != inFlight_.begin()) {
    const Pending &p = *std::prev(probe);
    cudaError_t err = cudaEventQuery(p.done);
    if (err == cudaErrorNotReady)
      return false;
    if (err != cudaSuccess) {
      // A sticky CUDA error (a kernel fault): nothing on this device will
      // complete again, so fail rather than wait forever.
      failure_.fail(p.id, "nccl " + p.what + ": " + cudaText(err));
      ncclBroken_ = true;
    }
  }
  for (auto it = inFlight_.begin(); it != end; ++it)
    if (it->done)
      pool_.push_back(it->done);
  inFlight_.erase(inFlight_.begin(), end);
  doneThrough_ = std::max(doneThrough_, target);
  oldestSince_ = Clock::now();
  return true;
}

void NcclCommunicatorImpl::retireCompletedLocked() {
  while (!inFlight_.empty() && retireLocked(inFlight_.front().id)) {
  }
}

Error NcclCommunicatorImpl::watchReplay(cudaStream_t stream,
                                        const std::string &what) {
  std::lock_guard<std::mutex> lock(mu_);
  cudaEvent_t done = takeEventLocked();
  if (!done)
    return Error("nccl: cannot create an event to watch the " + what);
  if (cudaError_t e = cudaEventRecord(done, stream); e != cudaSuccess) {
    pool_.push_back(done);
    return Error("nccl: watching the " + what + ": " + cudaText(e));
  }
  replays_.push_back({done, what, Clock::now()});
  return Error::success();
}

void NcclCommunicatorImpl::retireReplaysLocked() {
  while (!replays_.empty() &&
         cudaEventQuery(replays_.front().done) == cudaSuccess) {
    pool_.push_back(replays_.front().done);
    replays_.pop_front();
    // The next replay's time counts from now: it may have queued behind.
    if (!replays_.empty())
      replays_.front().since = Clock::now();
  }
}

Error NcclCommunicatorImpl::wait(CommHandle handle) {
  Clock::time_point spinUntil = Clock::now() + kSpin;
  std::chrono::microseconds sleep = kMinSleep;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (handle.id == 0 || handle.id >= nextId_)
        return Error(
            "nccl: wait on a handle this communicator did not issue (#" +
            std::to_string(handle.id) + ")");
      if (auto it = transferErrors_.find(handle.id);
          it != transferErrors_.end())
        return Error(it->second);
      if (isCapturedLocked(handle.id) &&
          !(failure_.failed() && handle.id >= failure_.failedFrom))
        return Error("nccl: collective #" + std::to_string(handle.id) +
                     " was captured into a CUDA graph: it runs when the graph "
                     "is launched; make a stream wait for it (streamWait) "
                     "instead");
      if (handle.id <= doneThrough_ || isCapturedLocked(handle.id))
        return failure_.resultOf(handle.id);
      if (capturingNowLocked())
        return Error("nccl: wait on collective #" + std::to_string(handle.id) +
                     " during a CUDA graph capture (it would invalidate the "
                     "capture); wait before capturing");
      if (retireLocked(handle.id))
        continue;
    }
    if (Clock::now() < spinUntil)
      continue;
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, kMaxSleep);
  }
}

bool NcclCommunicatorImpl::test(CommHandle handle) {
  std::lock_guard<std::mutex> lock(mu_);
  if (handle.id == 0 || handle.id >= nextId_ || handle.id <= doneThrough_ ||
      isCapturedLocked(handle.id) || transferErrors_.count(handle.id))
    return true;
  if (capturingNowLocked())
    return false;
  return retireLocked(handle.id);
}

Error NcclCommunicatorImpl::streamWait(CommHandle handle, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string name = "#" + std::to_string(handle.id);
  if (handle.id == 0 || handle.id >= nextId_)
    return Error(
        "nccl: streamWait on a handle this communicator did not issue (" +
        name + ")");
  if (auto it = transferErrors_.find(handle.id); it != transferErrors_.end())
    return Error(it->second);
  if (Error failed = failure_.resultOf(handle.id))
    return failed;
  cudaEvent_t event = nullptr;
  if (isCapturedLocked(handle.id)) {
    auto it = captureEvents_.find(handle.id);
    if (it == captureEvents_.end())
      return Error("nccl: streamWait on collective " + name +
                   ", captured into a CUDA graph whose capture has ended");
    event = it->second;
  } else if (handle.id > doneThrough_) {
    auto end =
        std::upper_bound(inFlight_.begin(), inFlight_.end(), handle.id,
                         [](uint64_t x, const Pending &p) { return x < p.id; });
    while (end != inFlight_.begin() && !std::prev(end)->done)
      --end;
    if (end != inFlight_.begin())
      event = std::prev(end)->done;
    if (event && capturing(stream))
      return Error("nccl: streamWait on collective " + name +
                   ", issued before the capture of this stream began and not "
                   "known to be complete; wait for it before capturing");
  }
  if (!event)
    return Error::success(); // complete already
  cudaError_t err = cudaStreamWaitEvent(stream, event, 0);
  if (err != cudaSuccess)
    return Error("nccl: streamWait on collective " + name + ": " +
                 cudaText(err));
  return Error::success();
}

Error NcclCommunicatorImpl::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure_.failed())
    return Error::success();
  return Error(failure_.message);
}

} // namespace kiln::runtime::comm
