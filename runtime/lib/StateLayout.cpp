//===- StateLayout.cpp - Persistent state in host memory ------------------===//

#include "kiln/Runtime/StateLayout.h"
#include "kiln/Runtime/Init.h"

#include <algorithm>

namespace kiln::runtime {

namespace {
/// [begin, end) of the flat buffer that rank `rank`'s shard of `v` holds.
std::pair<int64_t, int64_t> shardRange(const PlanValue &v, int rank) {
  int64_t n = v.numElements();
  return {rank * n, (rank + 1) * n};
}

/// The part of `part` inside [lo, hi): its first element and the count.
std::pair<int64_t, int64_t> overlap(const ShardPart &part, int64_t lo,
                                    int64_t hi) {
  int64_t begin = std::max(lo, part.offset);
  int64_t end = std::min(hi, part.offset + part.numElements());
  return {begin, std::max<int64_t>(0, end - begin)};
}

/// Where a tensor-parallel slice's elements sit in its whole tensor. The
/// slice of shape [outer..., L, inner...] (L along the slice's dim) is
/// `rows` runs of `row` = L x inner contiguous elements; run o of slice i
/// is elements [o wholeRow + i row, o wholeRow + (i + 1) row) of the whole
/// tensor, whose dim is tp L - pad long (wholeRow = (tp L - pad) inner).
/// With padding, only a prefix of the last slices' runs is in the whole
/// tensor; the rest (padding) is in no whole tensor. Without a slice, one
/// run: the tensor is whole.
struct SliceRuns {
  int64_t row = 0, wholeRow = 0;
  int64_t index = 0;

  SliceRuns(const Plan &plan, const std::vector<int64_t> &shape,
            const std::optional<TpSlice> &slice) {
    row = 1;
    for (size_t d = slice ? slice->dim : 0; d < shape.size(); ++d)
      row *= shape[d];
    wholeRow = row;
    if (slice) {
      index = slice->index;
      int64_t length = shape[slice->dim];
      int64_t inner = length == 0 ? 0 : row / length;
      wholeRow = (plan.mesh.tp * length - slice->pad) * inner;
    }
  }
  /// The whole tensor's index of the slice's element `e`.
  int64_t whole(int64_t e, int64_t slice) const {
    return row == 0 ? e : e / row * wholeRow + slice * row + e % row;
  }
  /// Elements of each of slice `slice`'s runs that are in the whole tensor.
  int64_t valid(int64_t slice) const {
    return std::clamp<int64_t>(wholeRow - slice * row, 0, row);
  }
  /// Calls fn(slice element, whole element, count) for the runs covering
  /// the slice's elements [first, first + count), padding left out.
  template <typename Fn>
  void forRuns(int64_t first, int64_t count, int64_t slice, Fn fn) const {
    int64_t inWhole = valid(slice);
    for (int64_t e = first, end = first + count; e < end;) {
      if (row == 0) {
        fn(e, e, end - e);
        return;
      }
      int64_t at = e % row, n = std::min(end - e, row - at);
      if (at < inWhole)
        fn(e, whole(e, slice), std::min(n, inWhole - at));
      e += n;
    }
  }
};

/// Elements [first, first + count) of a tensor `name` (shape `shape`, a
/// slice or whole) from its initialiser, into `out`.
void initializeRange(const Plan &plan, const InitSpec &init, uint64_t seed,
                     const std::string &name, const std::vector<int64_t> &shape,
                     const std::optional<TpSlice> &slice, int64_t first,
                     int64_t count, float *out) {
  std::fill_n(out, count, 0.0f); // padding
  SliceRuns runs(plan, shape, slice);
  runs.forRuns(first, count, runs.index, [&](int64_t e, int64_t w, int64_t n) {
    runtime::initialize(init, seed, name, w, n, out + (e - first));
  });
}

/// The whole tensor from this rank's slice `local`: the tp ranks'
/// slices gathered over `tp` (every tp rank must call this, in step).
Expected<std::vector<float>> gatherSlice(const Plan &plan,
                                         const std::vector<float> &local,
                                         const std::vector<int64_t> &shape,
                                         const std::optional<TpSlice> &slice,
                                         comm::Communicator *tp,
                                         const std::string &name) {
  if (!slice)
    return local;
  if (!tp || tp->size() != plan.mesh.tp)
    return Error("gathering '" + name + "' needs the tp communicator");
  int64_t n = static_cast<int64_t>(local.size()), wholeSize = 1;
  for (int64_t d : wholeShape(plan, shape, slice))
    wholeSize *= d;
  std::vector<float> all(n * plan.mesh.tp), whole(wholeSize);
  comm::CommHandle h =
      tp->startAllGather(local.data(), all.data(), n, comm::ElementType::F32);
  if (Error failure = tp->wait(h))
    return Error("gathering '" + name + "' over tp: " + failure.message());
  SliceRuns runs(plan, shape, slice);
  for (int64_t r = 0; r < plan.mesh.tp; ++r)
    runs.forRuns(0, n, r, [&](int64_t e, int64_t w, int64_t count) {
      std::copy_n(all.begin() + r * n + e, count, whole.begin() + w);
    });
  return whole;
}

/// This plan's slice of the whole tensor `whole` (the tensor itself when
/// it is not sliced).
std::vector<float> sliceOf(const Plan &plan, const std::vector<float> &whole,
                           const std::vector<int64_t> &shape,
                           const std::optional<TpSlice> &slice) {
  if (!slice)
    return whole;
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  std::vector<float> local(n);
  SliceRuns runs(plan, shape, slice);
  runs.forRuns(0, n, runs.index, [&](int64_t e, int64_t w, int64_t count) {
    std::copy_n(whole.begin() + w, count, local.begin() + e);
  });
  return local;
}
} // namespace

HostStates zeroStates(const Plan &plan) {
  HostStates states;
  for (const PlanValue &v : plan.values)
    if (v.kind == PlanValue::State)
      states[v.id].assign(v.numElements(), 0.0f);
  return states;
}

void initializeStates(const Plan &plan, int rank, uint64_t seed,
                      HostStates &states) {
  for (const PlanStep &step : plan.entry("init")->steps) {
    const PlanValue &v = plan.values[step.results[0]];
    std::vector<float> &data = states[v.id];
    data.resize(v.numElements());
    if (v.shardOf.empty()) {
      initializeRange(plan, v.init, seed, v.name, v.shape, v.tp, 0,
                      v.numElements(), data.data());
      continue;
    }
    std::fill(data.begin(), data.end(), 0.0f); // padding
    auto [lo, hi] = shardRange(v, rank);
    for (const ShardPart &part : v.shardOf) {
      auto [begin, count] = overlap(part, lo, hi);
      if (count > 0)
        initializeRange(plan, part.init, seed, part.name, part.shape, part.tp,
                        begin - part.offset, count, data.data() + (begin - lo));
    }
  }
}

Expected<std::vector<FloatTensor>> unshardedStates(const Plan &plan,
                                                   const HostStates &states,
                                                   comm::Communicator *dpShard,
                                                   comm::Communicator *tp) {
  std::vector<FloatTensor> out;
  for (const PlanValue &v : plan.values) {
    if (v.kind != PlanValue::State)
      continue;
    const std::vector<float> &data = states.at(v.id);
    if (v.shardOf.empty()) {
      Expected<std::vector<float>> whole =
          gatherSlice(plan, data, v.shape, v.tp, tp, v.name);
      if (!whole)
        return whole.takeError();
      out.push_back({v.name, wholeShape(plan, v.shape, v.tp), *whole});
      continue;
    }
    std::vector<float> flat = data; // one rank: the shard is everything
    if (plan.mesh.dpShard > 1) {
      if (!dpShard)
        return Error("gathering '" + v.name + "' needs a communicator");
      flat.resize(data.size() * plan.mesh.dpShard);
      comm::CommHandle h = dpShard->startAllGather(
          data.data(), flat.data(), static_cast<int64_t>(data.size()),
          comm::ElementType::F32);
      if (Error failure = dpShard->wait(h))
        return Error("gathering '" + v.name + "': " + failure.message());
    }
    for (const ShardPart &part : v.shardOf) {
      Expected<std::vector<float>> whole = gatherSlice(
          plan,
          std::vector<float>(flat.begin() + part.offset,
                             flat.begin() + part.offset + part.numElements()),
          part.shape, part.tp, tp, part.name);
      if (!whole)
        return whole.takeError();
      out.push_back({part.name, wholeShape(plan, part.shape, part.tp), *whole});
    }
  }
  return out;
}

Error setUnshardedStates(
    const Plan &plan, int rank,
    const std::map<std::string, const FloatTensor *> &byName,
    HostStates &states) {
  // The slice of the whole tensor `name` that a value or part holds.
  auto find = [&](const std::string &name, const std::vector<int64_t> &shape,
                  const std::optional<TpSlice> &slice,
                  std::vector<float> &local) -> Error {
    auto it = byName.find(name);
    if (it == byName.end())
      return Error("no tensor '" + name + "'");
    if (it->second->shape != wholeShape(plan, shape, slice))
      return Error("tensor '" + name + "' has another shape than the model's");
    local = sliceOf(plan, it->second->data, shape, slice);
    return Error::success();
  };
  for (const PlanValue &v : plan.values) {
    if (v.kind != PlanValue::State)
      continue;
    std::vector<float> &data = states[v.id];
    if (v.shardOf.empty()) {
      if (Error e = find(v.name, v.shape, v.tp, data))
        return e;
      continue;
    }
    data.assign(v.numElements(), 0.0f);
    auto [lo, hi] = shardRange(v, rank);
    std::vector<float> local;
    for (const ShardPart &part : v.shardOf) {
      if (Error e = find(part.name, part.shape, part.tp, local))
        return e;
      auto [begin, count] = overlap(part, lo, hi);
      std::copy_n(local.begin() + (begin - part.offset), count,
                  data.begin() + (begin - lo));
    }
  }
  return Error::success();
}

} // namespace kiln::runtime
