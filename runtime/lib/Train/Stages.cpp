//===- Stages.cpp - A checkpoint's tensors across pipeline stages ---------===//
//
// Tensors travel as bytes: for each, the name's length and bytes, the rank
// and dims, then (with data) the f32 elements, all little-endian as this
// machine holds them (every rank of a run is the same build).
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Train/Stages.h"

#include <cstring>

namespace kiln::runtime {

namespace {

using comm::ElementType;

/// The tags of the two transfers: sizes are all-gathered, payloads sent.
constexpr int kPayloadTag = 0;

void putInt(std::string &out, int64_t v) {
  out.append(reinterpret_cast<const char *>(&v), sizeof v);
}

std::string encode(const std::vector<FloatTensor> &tensors, bool data) {
  std::string out;
  putInt(out, static_cast<int64_t>(tensors.size()));
  for (const FloatTensor &t : tensors) {
    putInt(out, static_cast<int64_t>(t.name.size()));
    out += t.name;
    putInt(out, static_cast<int64_t>(t.shape.size()));
    for (int64_t d : t.shape)
      putInt(out, d);
    if (data) {
      putInt(out, static_cast<int64_t>(t.data.size()));
      out.append(reinterpret_cast<const char *>(t.data.data()),
                 t.data.size() * sizeof(float));
    }
  }
  return out;
}

/// Reads what encode wrote; bytes from another rank of this run, so a
/// short or inconsistent buffer is an internal error, reported as one.
class Reader {
public:
  explicit Reader(const std::string &bytes) : bytes(bytes) {}
  bool integer(int64_t &v) {
    if (bytes.size() - at < sizeof v)
      return false;
    std::memcpy(&v, bytes.data() + at, sizeof v);
    at += sizeof v;
    return v >= 0;
  }
  bool text(std::string &s, int64_t n) {
    if (static_cast<int64_t>(bytes.size() - at) < n)
      return false;
    s.assign(bytes.data() + at, n);
    at += n;
    return true;
  }
  bool floats(std::vector<float> &v, int64_t n) {
    if (static_cast<int64_t>((bytes.size() - at) / sizeof(float)) < n)
      return false;
    v.resize(n);
    std::memcpy(v.data(), bytes.data() + at, n * sizeof(float));
    at += n * sizeof(float);
    return true;
  }

private:
  const std::string &bytes;
  size_t at = 0;
};

Expected<std::vector<FloatTensor>> decode(const std::string &bytes, bool data) {
  Reader r(bytes);
  int64_t count = 0;
  std::vector<FloatTensor> out;
  Error bad("internal: a pipeline stage's tensor list is malformed");
  if (!r.integer(count))
    return bad;
  for (int64_t i = 0; i < count; ++i) {
    FloatTensor t;
    int64_t n = 0, rank = 0;
    if (!r.integer(n) || !r.text(t.name, n) || !r.integer(rank))
      return bad;
    t.shape.resize(rank);
    for (int64_t &d : t.shape)
      if (!r.integer(d))
        return bad;
    if (data && (!r.integer(n) || !r.floats(t.data, n)))
      return bad;
    out.push_back(std::move(t));
  }
  return out;
}

/// Every position's byte count.
Expected<std::vector<int64_t>> allSizes(int64_t mine, comm::Communicator &pp) {
  std::vector<int64_t> sizes(pp.size());
  comm::CommHandle h =
      pp.startAllGather(&mine, sizes.data(), sizeof mine, ElementType::U8);
  if (Error failure = pp.wait(h))
    return Error("exchanging the stages' sizes: " + failure.message());
  return sizes;
}

} // namespace

Expected<std::vector<FloatTensor>> gatherStages(std::vector<FloatTensor> mine,
                                                comm::Communicator &pp) {
  std::string bytes = encode(mine, true);
  Expected<std::vector<int64_t>> sizes =
      allSizes(static_cast<int64_t>(bytes.size()), pp);
  if (!sizes)
    return sizes.takeError();
  if (pp.rank() != 0) {
    comm::CommHandle h = pp.startSend(bytes.data(), (*sizes)[pp.rank()],
                                      ElementType::U8, 0, kPayloadTag);
    if (Error failure = pp.wait(h))
      return Error("sending this stage's tensors: " + failure.message());
    return std::move(mine);
  }
  for (int from = 1; from < pp.size(); ++from) {
    std::string theirs((*sizes)[from], '\0');
    comm::CommHandle h = pp.startRecv(theirs.data(), (*sizes)[from],
                                      ElementType::U8, from, kPayloadTag);
    if (Error failure = pp.wait(h))
      return Error("receiving pp position " + std::to_string(from) +
                   "'s tensors: " + failure.message());
    Expected<std::vector<FloatTensor>> tensors = decode(theirs, true);
    if (!tensors)
      return tensors.takeError();
    for (FloatTensor &t : *tensors)
      mine.push_back(std::move(t));
  }
  return std::move(mine);
}

Error mergeStageShapes(std::map<std::string, std::vector<int64_t>> &shapes,
                       comm::Communicator &pp) {
  std::vector<FloatTensor> mine;
  for (const auto &[name, shape] : shapes)
    mine.push_back({name, shape, {}});
  std::string bytes = encode(mine, false);
  Expected<std::vector<int64_t>> sizes =
      allSizes(static_cast<int64_t>(bytes.size()), pp);
  if (!sizes)
    return sizes.takeError();
  int64_t most = 0;
  for (int64_t n : *sizes)
    most = std::max(most, n);
  bytes.resize(most, '\0');
  std::string all(most * pp.size(), '\0');
  comm::CommHandle h =
      pp.startAllGather(bytes.data(), all.data(), most, ElementType::U8);
  if (Error failure = pp.wait(h))
    return Error("exchanging the stages' tensor shapes: " + failure.message());
  for (int p = 0; p < pp.size(); ++p) {
    Expected<std::vector<FloatTensor>> theirs =
        decode(all.substr(p * most, (*sizes)[p]), false);
    if (!theirs)
      return theirs.takeError();
    for (const FloatTensor &t : *theirs) {
      auto [it, fresh] = shapes.try_emplace(t.name, t.shape);
      if (!fresh && it->second != t.shape)
        return Error("internal: pipeline stages disagree on the shape of '" +
                     t.name + "'");
    }
  }
  return Error::success();
}

} // namespace kiln::runtime
