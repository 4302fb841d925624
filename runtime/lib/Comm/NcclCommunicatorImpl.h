//===- NcclCommunicatorImpl.h - The NCCL backend's class --------*- C++ -*-===//
//
// Private to runtime/lib/Comm: the class behind NcclCommunicator.h, shared
// by NcclCommunicator.cpp (collectives, completion, streams) and
// NcclBootstrap.cpp (device choice, NCCL set-up, the watchdog thread).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_COMM_NCCLCOMMUNICATORIMPL_H
#define KILN_RUNTIME_COMM_NCCLCOMMUNICATORIMPL_H

#include "kiln/Runtime/Comm/NcclCommunicator.h"

#include "Collective.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kiln::runtime::comm {

/// `text` with line breaks turned into spaces and no trailing blanks.
std::string oneLine(std::string text);
/// "cudaErrorX: description".
std::string cudaText(cudaError_t err);
/// NCCL's name for `rc`, with its last error message when it has one.
std::string ncclText(ncclResult_t rc, ncclComm_t comm);
/// Whether `stream` is in a CUDA graph capture. A failed query counts as
/// capturing (the legacy stream answers with an error while a blocking
/// stream captures), so that nothing that would break a capture runs.
bool capturing(cudaStream_t stream);

/// Makes `device` current for the scope, then restores the caller's.
class DeviceGuard {
public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard &) = delete;
  DeviceGuard &operator=(const DeviceGuard &) = delete;

private:
  int previous_ = -1;
};

class NcclCommunicatorImpl final
    : public IssuingCommunicator<NcclCommunicator> {
public:
  using Clock = std::chrono::steady_clock;

  NcclCommunicatorImpl(std::unique_ptr<Communicator> host, int device,
                       double watchdogSeconds)
      : host_(std::move(host)), rank_(host_->rank()), size_(host_->size()),
        device_(device), watchdogSeconds_(watchdogSeconds) {}
  ~NcclCommunicatorImpl() override;

  /// Takes over `comm` and makes the stream, the events and the watchdog.
  Error setUp(ncclComm_t comm);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char *backendName() const override { return "nccl"; }
  bool exactRingOrderReduction() const override { return false; }

  Error wait(CommHandle handle) override;
  bool test(CommHandle handle) override;
  /// ncclCommSplit of this communicator, with the host communicator split
  /// alike (the new one's host()), on the same GPU (NcclBootstrap.cpp).
  Expected<std::unique_ptr<Communicator>> split(int color, int key) override;
  Error barrier() override { return issueBarrier(); }
  Error failure() const override;

  int device() const override { return device_; }
  Communicator &host() override { return *host_; }
  void setProducerStream(cudaStream_t stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    producer_ = stream;
  }
  Error streamWait(CommHandle handle, cudaStream_t stream) override;
  cudaStream_t stream() const override { return stream_; }
  Error watchReplay(cudaStream_t stream, const std::string &what) override;

private:
  /// A collective issued outside a capture and not yet seen complete.
  struct Pending {
    uint64_t id;
    cudaEvent_t done; // recorded after it; null if recording failed
    std::string what; // describeCollective, for error lines
  };

  CommHandle issue(CollectiveKind kind, const void *send, void *recv,
                   int64_t count, ElementType type, ReduceOp op,
                   int shift) override;
  /// Not built yet: the handle fails with one line (the argument check's,
  /// else "not implemented"); the communicator does not.
  CommHandle issueTransfer(bool send, void *buffer, int64_t count,
                           ElementType type, int peer, int tag) override;

  // Under mu_.
  cudaEvent_t takeEventLocked();
  bool isCapturedLocked(uint64_t id) const;
  bool capturingNowLocked() const;
  /// Whether every collective issued outside a capture up to `target` is
  /// complete; if so retires their records. Queries one event.
  bool retireLocked(uint64_t target);
  /// Retires the oldest records while their events say complete.
  void retireCompletedLocked();
  /// Forgets the oldest replays while their events say complete.
  void retireReplaysLocked();

  // The watchdog thread (NcclBootstrap.cpp).
  void watchdogMain();
  [[noreturn]] void fire(const std::string &what, const std::string &why);

  // Declared first: destroyed last, after the NCCL communicator.
  std::unique_ptr<Communicator> host_;
  const int rank_, size_, device_;
  const double watchdogSeconds_;

  // Set up once, then constant.
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t joinEvent_ = nullptr; // under issueMu_
  void *barrierBuffer_ = nullptr;   // one f32 on the device

  std::mutex issueMu_; // one start call at a time, in issue order

  mutable std::mutex mu_;
  cudaStream_t producer_ = nullptr;
  uint64_t nextId_ = 1;
  /// Every collective issued outside a capture with id <= this is complete.
  uint64_t doneThrough_ = 0;
  FailureState failure_;
  /// An NCCL or CUDA call failed: abort instead of finalising at the end.
  bool ncclBroken_ = false;
  std::deque<Pending> inFlight_; // issue order
  /// The point-to-point transfers' handles and their error lines.
  std::map<uint64_t, std::string> transferErrors_;
  /// A graph replay not yet seen complete (watchReplay).
  struct Replay {
    cudaEvent_t done;
    std::string what;
    Clock::time_point since; // when it became the oldest replay
  };
  std::deque<Replay> replays_; // launch order
  /// When inFlight_.front() became the oldest collective in flight.
  Clock::time_point oldestSince_ = Clock::now();
  std::vector<cudaEvent_t> pool_;
  /// Ids issued in a capture, as increasing [first, last] ranges.
  std::vector<std::pair<uint64_t, uint64_t>> capturedRanges_;
  /// Their events while that capture may still go on.
  std::map<uint64_t, cudaEvent_t> captureEvents_;

  std::thread watchdog_;
  std::mutex watchdogMu_;
  std::condition_variable watchdogCv_;
  bool stopping_ = false; // under watchdogMu_
};

} // namespace kiln::runtime::comm

#endif // KILN_RUNTIME_COMM_NCCLCOMMUNICATORIMPL_H
