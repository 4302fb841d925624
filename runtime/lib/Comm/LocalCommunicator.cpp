//===- LocalCommunicator.cpp - World size 1 -------------------------------===//
//
// Each collective is carried out inside its start call: an all-gather is a
// copy, a reduction is reduceRows over the one contribution (so bf16 goes
// through the same widen-fold-round as on N ranks, which leaves every
// non-NaN value unchanged). Completion is therefore immediate and in issue
// order. A mutex makes the calls safe from several threads, like the MPI
// backend's. A point-to-point transfer has no peer to go to (any peer is
// out of range or this rank): its handle fails with the argument check's
// line, and the communicator does not (docs/communicator.md, "Point to
// point").
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Comm/LocalCommunicator.h"

#include "Collective.h"

#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <mutex>

namespace kiln::runtime::comm {

namespace {

class LocalCommunicator final : public IssuingCommunicator<Communicator> {
public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char *backendName() const override { return "local"; }
  // One rank: no peer to send to.
  bool hasTransfers() const override { return false; }

  Error wait(CommHandle handle) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (handle.id == 0 || handle.id >= nextId_)
      return Error(
          "local: wait on a handle this communicator did not issue (#" +
          std::to_string(handle.id) + ")");
    if (auto it = transferErrors_.find(handle.id); it != transferErrors_.end())
      return Error(it->second);
    return failure_.resultOf(handle.id);
  }

  bool test(CommHandle) override { return true; }

  /// A world of one rank splits into one rank: the local backend has no
  /// groups of several ranks.
  Expected<std::unique_ptr<Communicator>> split(int color, int) override {
    if (color < 0)
      return Error("local: split needs a color of 0 or more, got " +
                   std::to_string(color));
    return createLocalCommunicator();
  }

  Error barrier() override { return issueBarrier(); }

  Error failure() const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.failed())
      return Error::success();
    return Error(failure_.message);
  }

private:
  CommHandle issue(CollectiveKind kind, const void *send, void *recv,
                   int64_t count, ElementType type, ReduceOp op,
                   int shift) override {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t id = nextId_++;
    if (failure_.failed())
      return {id};
    if (Error why =
            checkCollective(kind, send, recv, count, type, op, 1,
                            std::numeric_limits<int64_t>::max(), shift)) {
      failure_.fail(id, std::string("local ") +
                            describeCollective(kind, id, count, type, op) +
                            ": " + why.message());
      return {id};
    }
    try {
      // One rank: a gather or a send-recv (shift 0) is a copy.
      if ((kind == CollectiveKind::AllGather ||
           kind == CollectiveKind::SendRecv) &&
          count > 0)
        std::memcpy(recv, send, count * elementBytes(type));
      else if (kind != CollectiveKind::Barrier)
        reduceRows(send, 1, 0, count, type, op, recv, scratch_);
    } catch (const std::exception &e) { // scratch space that cannot be had
      failure_.fail(id, std::string("local ") +
                            describeCollective(kind, id, count, type, op) +
                            ": " + e.what());
    }
    return {id};
  }

  CommHandle issueTransfer(bool send, void *buffer, int64_t count,
                           ElementType type, int peer, int tag) override {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t id = nextId_++;
    Error why = checkTransfer(buffer, count, type, peer, tag, 0, 1, maxTag(),
                              std::numeric_limits<int64_t>::max());
    // Every peer is out of range at world size 1, so `why` always holds.
    transferErrors_[id] =
        "local " + describeTransfer(send, id, count, type, peer, tag) + ": " +
        (why ? why.message() : std::string("no other rank to transfer with"));
    return {id};
  }

  mutable std::mutex mu_;
  uint64_t nextId_ = 1;
  /// Each transfer's error line.
  std::map<uint64_t, std::string> transferErrors_;
  FailureState failure_;
  std::vector<float> scratch_;
};

} // namespace

std::unique_ptr<Communicator> createLocalCommunicator() {
  return std::make_unique<LocalCommunicator>();
}

} // namespace kiln::runtime::comm
