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
      runtime::initialize(v.init, seed, v.name, 0, v.numElements(),
                          data.data());
      continue;
    }
    std::fill(data.begin(), data.end(), 0.0f); // padding
    auto [lo, hi] = shardRange(v, rank);
    for (const ShardPart &part : v.shardOf) {
      auto [begin, count] = overlap(part, lo, hi);
      if (count > 0)
        runtime::initialize(part.init, seed, part.name, begin - part.offset,
                            count, data.data() + (begin - lo));
    }
  }
}

Expected<std::vector<FloatTensor>>
unshardedStates(const Plan &plan, const HostStates &states,
                comm::Communicator *communicator) {
  std::vector<FloatTensor> out;
  for (const PlanValue &v : plan.values) {
    if (v.kind != PlanValue::State)
      continue;
    const std::vector<float> &data = states.at(v.id);
    if (v.shardOf.empty()) {
      out.push_back({v.name, v.shape, data});
      continue;
    }
    std::vector<float> flat = data; // one rank: the shard is everything
    if (plan.ranks > 1) {
      if (!communicator)
        return Error("gathering '" + v.name + "' needs a communicator");
      flat.resize(data.size() * plan.ranks);
      comm::CommHandle h = communicator->startAllGather(
          data.data(), flat.data(), static_cast<int64_t>(data.size()),
          comm::ElementType::F32);
      if (Error failure = communicator->wait(h))
        return Error("gathering '" + v.name + "': " + failure.message());
    }
    for (const ShardPart &part : v.shardOf)
      out.push_back({part.name, part.shape,
                     std::vector<float>(flat.begin() + part.offset,
                                        flat.begin() + part.offset +
                                            part.numElements())});
  }
  return out;
}

Error setUnshardedStates(
    const Plan &plan, int rank,
    const std::map<std::string, const FloatTensor *> &byName,
    HostStates &states) {
  auto find = [&](const std::string &name, const std::vector<int64_t> &shape,
                  const FloatTensor *&t) -> Error {
    auto it = byName.find(name);
    if (it == byName.end())
      return Error("no tensor '" + name + "'");
    if (it->second->shape != shape)
      return Error("tensor '" + name + "' has another shape than the model's");
    t = it->second;
    return Error::success();
  };
  for (const PlanValue &v : plan.values) {
    if (v.kind != PlanValue::State)
      continue;
    std::vector<float> &data = states[v.id];
    const FloatTensor *t = nullptr;
    if (v.shardOf.empty()) {
      if (Error e = find(v.name, v.shape, t))
        return e;
      data = t->data;
      continue;
    }
    data.assign(v.numElements(), 0.0f);
    auto [lo, hi] = shardRange(v, rank);
    for (const ShardPart &part : v.shardOf) {
      if (Error e = find(part.name, part.shape, t))
        return e;
      auto [begin, count] = overlap(part, lo, hi);
      std::copy_n(t->data.begin() + (begin - part.offset), count,
                  data.begin() + (begin - lo));
    }
  }
  return Error::success();
}

} // namespace kiln::runtime
