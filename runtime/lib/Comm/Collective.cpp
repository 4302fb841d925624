//===- Collective.cpp - Argument checks, failed state, reductions ---------===//
//
// The reductions are written as plain loops over elements, one rank's row
// at a time; each element's own order of operations is the ring order the
// specification fixes (the compiler may vectorise across elements, never
// reassociate within one: no -ffast-math, and this file is built with
// -ffp-contract=off).
//
//===----------------------------------------------------------------------===//

#include "Collective.h"

#include "kiln/Runtime/Numerics/Bf16.h"

#include <cmath>
#include <cstring>

namespace kiln::runtime::comm {

namespace {

const char *kindName(CollectiveKind kind) {
  switch (kind) {
  case CollectiveKind::AllGather:
    return "all-gather";
  case CollectiveKind::ReduceScatter:
    return "reduce-scatter";
  case CollectiveKind::AllReduce:
    return "all-reduce";
  case CollectiveKind::SendRecv:
    return "send-recv";
  case CollectiveKind::Barrier:
    return "barrier";
  case CollectiveKind::PointToPoint:
    return "point-to-point transfer";
  }
  return "collective";
}

bool validType(ElementType type) {
  return type == ElementType::F32 || type == ElementType::BF16 ||
         type == ElementType::U8;
}

bool validOp(ReduceOp op) { return op == ReduceOp::Sum || op == ReduceOp::Max; }

/// The max rule of the specification: a NaN already held stays, a NaN
/// contribution is taken, otherwise the larger value, +0 above -0.
inline float maxStep(float acc, float x) {
  if (std::isnan(acc))
    return acc;
  if (std::isnan(x) || x > acc)
    return x;
  if (x == acc && std::signbit(acc) && !std::signbit(x))
    return x;
  return acc;
}

} // namespace

std::string describeCollective(CollectiveKind kind, uint64_t id, int64_t count,
                               ElementType type, ReduceOp op) {
  std::string s = std::string(kindName(kind)) + " #" + std::to_string(id);
  if (kind == CollectiveKind::Barrier)
    return s;
  s += " (" + std::to_string(count) + " x " + elementTypeName(type);
  if (kind != CollectiveKind::AllGather && kind != CollectiveKind::SendRecv &&
      kind != CollectiveKind::PointToPoint)
    s += std::string(", ") + reduceOpName(op);
  return s + ")";
}

Error checkCollective(CollectiveKind kind, const void *send, const void *recv,
                      int64_t count, ElementType type, ReduceOp op, int size,
                      int64_t maxElements, int shift) {
  if (kind == CollectiveKind::Barrier)
    return Error::success();
  if (kind == CollectiveKind::PointToPoint)
    return Error("this backend has no point-to-point transfers");
  // A send-recv moves data like a gather: any type, no reduction.
  bool moves =
      kind == CollectiveKind::AllGather || kind == CollectiveKind::SendRecv;
  if (kind == CollectiveKind::SendRecv && (shift < 0 || shift >= size))
    return Error("shift " + std::to_string(shift) + " outside [0, " +
                 std::to_string(size) + ")");
  if (!validType(type))
    return Error("unknown element type " +
                 std::to_string(static_cast<int>(type)));
  if (!moves && type == ElementType::U8)
    return Error("u8 (raw bytes) can be gathered but not reduced");
  if (!moves && !validOp(op))
    return Error("unknown reduction " + std::to_string(static_cast<int>(op)));
  if (count < 0)
    return Error("negative count");
  if (count == 0)
    return Error::success();
  if (!send || !recv)
    return Error(std::string("null ") + (send ? "receive" : "send") +
                 " buffer");
  // Elements of the larger buffer: size*count except for all-reduce.
  int64_t factor =
      kind == CollectiveKind::AllReduce || kind == CollectiveKind::SendRecv
          ? 1
          : size;
  if (count > maxElements / factor)
    return Error("more than " + std::to_string(maxElements) +
                 " elements in one buffer, this backend's limit");
  int64_t bytes = elementBytes(type);
  int64_t sendBytes =
      count * bytes * (kind == CollectiveKind::ReduceScatter ? size : 1);
  int64_t recvBytes =
      count * bytes * (kind == CollectiveKind::AllGather ? size : 1);
  auto s = reinterpret_cast<uintptr_t>(send);
  auto r = reinterpret_cast<uintptr_t>(recv);
  bool overlap = s < r + static_cast<uintptr_t>(recvBytes) &&
                 r < s + static_cast<uintptr_t>(sendBytes);
  if (overlap && !(kind == CollectiveKind::AllReduce && s == r))
    return Error(kind == CollectiveKind::AllReduce
                     ? "send and receive buffers overlap without being the "
                       "same"
                     : "send and receive buffers overlap");
  return Error::success();
}

std::string describeTransfer(bool send, uint64_t id, int64_t count,
                             ElementType type, int peer, int tag) {
  return std::string(send ? "send #" : "recv #") + std::to_string(id) + " (" +
         std::to_string(count) + " x " + elementTypeName(type) +
         (send ? ", to rank " : ", from rank ") + std::to_string(peer) +
         ", tag " + std::to_string(tag) + ")";
}

Error checkTransfer(const void *buffer, int64_t count, ElementType type,
                    int peer, int tag, int rank, int size, int maxTag,
                    int64_t maxElements) {
  if (peer < 0 || peer >= size)
    return Error("peer " + std::to_string(peer) +
                 " is not a rank of this communicator of " +
                 std::to_string(size));
  if (peer == rank)
    return Error("peer " + std::to_string(peer) +
                 " is this rank: a transfer needs another rank");
  if (tag < 0 || tag > maxTag)
    return Error("tag " + std::to_string(tag) + " outside [0, " +
                 std::to_string(maxTag) + "]");
  if (!validType(type))
    return Error("unknown element type " +
                 std::to_string(static_cast<int>(type)));
  if (count < 0)
    return Error("negative count");
  if (count > 0 && !buffer)
    return Error("null buffer");
  if (count > maxElements)
    return Error("more than " + std::to_string(maxElements) +
                 " elements in one buffer, this backend's limit");
  return Error::success();
}

void FailureState::fail(uint64_t id, std::string why) {
  if (failedFrom != 0) {
    if (id < failedFrom)
      earlier.emplace(id, std::move(why));
    return;
  }
  failedFrom = id;
  message = std::move(why);
}

void FailureState::failFrom(uint64_t from, std::string why) {
  if (failedFrom != 0)
    return;
  failedFrom = from;
  failedItself = false;
  message = std::move(why);
}

Error FailureState::resultOf(uint64_t id) const {
  if (auto it = earlier.find(id); it != earlier.end())
    return Error(it->second);
  if (failedFrom == 0 || id < failedFrom)
    return Error::success();
  if (id == failedFrom && failedItself)
    return Error(message);
  return Error("collective #" + std::to_string(id) +
               " not run: the communicator failed earlier: " + message);
}

void reduceRows(const void *rows, int nranks, int chunk, int64_t count,
                ElementType type, ReduceOp op, void *out,
                std::vector<float> &scratch) {
  if (count <= 0 || nranks <= 0)
    return;
  // The fold's k-th row: the ring order, starting after `chunk`.
  auto rowAt = [&](int i) { return (chunk + 1 + i) % nranks; };
  if (type == ElementType::F32) {
    const float *in = static_cast<const float *>(rows);
    float *acc = static_cast<float *>(out);
    if (acc != in + rowAt(0) * count)
      std::memcpy(acc, in + rowAt(0) * count, count * sizeof(float));
    for (int k = 1; k < nranks; ++k) {
      const float *row = in + rowAt(k) * count;
      if (op == ReduceOp::Sum)
        for (int64_t i = 0; i < count; ++i)
          acc[i] = acc[i] + row[i];
      else
        for (int64_t i = 0; i < count; ++i)
          acc[i] = maxStep(acc[i], row[i]);
    }
    return;
  }
  // bf16: widen (exactly) to f32, fold in f32, round once.
  const uint16_t *in = static_cast<const uint16_t *>(rows);
  if (static_cast<int64_t>(scratch.size()) < count)
    scratch.resize(count);
  float *acc = scratch.data();
  const uint16_t *first = in + rowAt(0) * count;
  for (int64_t i = 0; i < count; ++i)
    acc[i] = numerics::fromBf16Bits(first[i]);
  for (int k = 1; k < nranks; ++k) {
    const uint16_t *row = in + rowAt(k) * count;
    if (op == ReduceOp::Sum)
      for (int64_t i = 0; i < count; ++i)
        acc[i] = acc[i] + numerics::fromBf16Bits(row[i]);
    else
      for (int64_t i = 0; i < count; ++i)
        acc[i] = maxStep(acc[i], numerics::fromBf16Bits(row[i]));
  }
  uint16_t *dst = static_cast<uint16_t *>(out);
  for (int64_t i = 0; i < count; ++i)
    dst[i] = numerics::toBf16Bits(acc[i]);
}

} // namespace kiln::runtime::comm
