//===- MirrorCommunicator.cpp - N ranks in one process, all alike ---------===//

#include "MirrorCommunicator.h"

// The backends' shared argument checks and reduction (private to
// runtime/lib/Comm; this test tool is a backend of its own).
#include "Collective.h"

#include <cstring>
#include <limits>

namespace kiln::fuzz {

namespace {

using namespace runtime::comm;
using runtime::Error;

class MirrorCommunicator final : public IssuingCommunicator<Communicator> {
public:
  MirrorCommunicator(int rank, int size) : rank_(rank), size_(size) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char *backendName() const override { return "mirror"; }

  Error wait(CommHandle handle) override {
    if (handle.id == 0 || handle.id >= nextId_)
      return Error(
          "mirror: wait on a handle this communicator did not issue (#" +
          std::to_string(handle.id) + ")");
    return failure_.resultOf(handle.id);
  }
  bool test(CommHandle) override { return true; }
  Error barrier() override { return issueBarrier(); }
  Error failure() const override {
    if (!failure_.failed())
      return Error::success();
    return Error(failure_.message);
  }

private:
  CommHandle issue(CollectiveKind kind, const void *send, void *recv,
                   int64_t count, ElementType type, ReduceOp op,
                   int shift) override {
    uint64_t id = nextId_++;
    if (failure_.failed())
      return {id};
    if (Error why =
            checkCollective(kind, send, recv, count, type, op, size_,
                            std::numeric_limits<int64_t>::max(), shift)) {
      failure_.fail(id, "mirror " +
                            describeCollective(kind, id, count, type, op) +
                            ": " + why.message());
      return {id};
    }
    if (kind == CollectiveKind::Barrier || count == 0)
      return {id};
    int64_t bytes = count * elementBytes(type);
    const char *from = static_cast<const char *>(send);
    // Every rank holds what this one does: what arrives is its own buffer.
    if (kind == CollectiveKind::SendRecv) {
      std::memcpy(recv, from, bytes);
      return {id};
    }
    if (kind == CollectiveKind::AllGather) {
      for (int r = 0; r < size_; ++r)
        std::memcpy(static_cast<char *>(recv) + r * bytes, from, bytes);
      return {id};
    }
    // The contributions to this rank's chunk, one row per rank: all this
    // rank's own.
    if (kind == CollectiveKind::ReduceScatter)
      from += rank_ * bytes;
    rows_.resize(static_cast<size_t>(bytes) * size_);
    for (int r = 0; r < size_; ++r)
      std::memcpy(rows_.data() + r * bytes, from, bytes);
    reduceRows(rows_.data(), size_, rank_, count, type, op, recv, scratch_);
    return {id};
  }

  int rank_, size_;
  uint64_t nextId_ = 1;
  FailureState failure_;
  std::vector<char> rows_;
  std::vector<float> scratch_;
};

} // namespace

std::unique_ptr<Communicator> createMirrorCommunicator(int rank, int size) {
  return std::make_unique<MirrorCommunicator>(rank, size);
}

} // namespace kiln::fuzz
