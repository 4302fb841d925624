//===- PipelineOrder.cpp - Pipeline schedules as unit orders --------------===//

#include "kiln/Transforms/PipelineOrder.h"

#include <algorithm>
#include <cstdio>
#include <limits>

using namespace kiln::pipeline;

std::optional<Schedule> kiln::pipeline::parseSchedule(const std::string &name) {
  if (name == "GPipe")
    return Schedule::GPipe;
  if (name == "1F1B")
    return Schedule::OneFOneB;
  if (name == "Interleaved1F1B")
    return Schedule::Interleaved1F1B;
  return std::nullopt;
}

std::string kiln::pipeline::describe(const Unit &unit) {
  return std::string(unit.backward ? "B" : "F") +
         std::to_string(unit.microbatch) + "s" + std::to_string(unit.stage);
}

namespace {
/// Rank r's forwards (or backwards) in the schedule's order. Megatron's
/// interleaving: virtual index i is microbatch (i / (pp v)) pp + i % pp of
/// the rank's chunk (i / pp) % v, counted backwards for the backward.
std::vector<Unit> sequence(Schedule schedule, Shape shape, int64_t rank,
                           bool backward) {
  int64_t pp = shape.pp, v = shape.stages / pp, m = shape.microbatches;
  std::vector<Unit> units;
  for (int64_t i = 0; i < m * v; ++i) {
    int64_t chunk = 0, k = i;
    if (schedule == Schedule::Interleaved1F1B) {
      chunk = (i / pp) % v;
      if (backward)
        chunk = v - 1 - chunk;
      k = (i / (pp * v)) * pp + i % pp;
    }
    units.push_back({backward, k, chunk * pp + rank});
  }
  return units;
}
} // namespace

std::vector<std::vector<Unit>>
kiln::pipeline::rankOrders(Schedule schedule, Shape shape, bool forwardOnly) {
  std::vector<std::vector<Unit>> orders(shape.pp);
  for (int64_t r = 0; r < shape.pp; ++r) {
    std::vector<Unit> f = sequence(schedule, shape, r, false);
    if (forwardOnly) {
      orders[r] = std::move(f);
      continue;
    }
    std::vector<Unit> b = sequence(schedule, shape, r, true);
    int64_t total = static_cast<int64_t>(f.size());
    int64_t warmup = total; // GPipe: every forward first
    if (schedule == Schedule::OneFOneB)
      warmup = std::min(shape.pp - 1 - r, total);
    else if (schedule == Schedule::Interleaved1F1B)
      warmup = std::min((shape.pp - 1 - r) * 2 +
                            (shape.stages / shape.pp - 1) * shape.pp,
                        total);
    std::vector<Unit> &order = orders[r];
    order.insert(order.end(), f.begin(), f.begin() + warmup);
    for (int64_t i = 0; i < total - warmup; ++i) {
      order.push_back(f[warmup + i]);
      order.push_back(b[i]);
    }
    order.insert(order.end(), b.begin() + (total - warmup), b.end());
  }
  return orders;
}

double Durations::of(const Unit &unit) const {
  const std::vector<double> &first =
      unit.backward ? firstBackward : firstForward;
  const std::vector<double> &last = unit.backward ? lastBackward : lastForward;
  if (unit.microbatch == 0 && !first.empty())
    return first[unit.stage];
  if (unit.microbatch == microbatches - 1 && !last.empty())
    return last[unit.stage];
  const std::vector<double> &per = unit.backward ? backward : forward;
  if (per.empty())
    return unit.backward ? 2.0 : 1.0;
  return per[unit.stage];
}

std::optional<Unit> kiln::pipeline::parseUnit(const std::string &text) {
  long long k = -1, s = -1;
  char kind = 0, tail = 0;
  if (std::sscanf(text.c_str(), "%c%llds%lld%c", &kind, &k, &s, &tail) != 3 ||
      (kind != 'F' && kind != 'B') || k < 0 || s < 0)
    return std::nullopt;
  return Unit{kind == 'B', k, s};
}

std::optional<Timeline>
kiln::pipeline::simulate(const std::vector<std::vector<Unit>> &orders,
                         Shape shape, const Durations &durations,
                         std::string &error) {
  int64_t n = shape.stages * shape.microbatches;
  // finished[backward][stage * m + k]: when that unit ends (< 0: not yet).
  std::vector<double> done[2] = {std::vector<double>(n, -1),
                                 std::vector<double>(n, -1)};
  auto at = [&](const Unit &u) -> double & {
    return done[u.backward][u.stage * shape.microbatches + u.microbatch];
  };
  Timeline t;
  t.start.resize(orders.size());
  t.finish.resize(orders.size());
  std::vector<size_t> next(orders.size(), 0);
  std::vector<double> free(orders.size(), 0);
  double busy = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t r = 0; r < orders.size(); ++r) {
      while (next[r] < orders[r].size()) {
        const Unit &u = orders[r][next[r]];
        double ready = free[r];
        auto need = [&](Unit dep) {
          double when = at(dep);
          if (when < 0)
            return false;
          ready = std::max(ready, when);
          return true;
        };
        bool ok = true;
        if (!u.backward && u.stage > 0)
          ok = need({false, u.microbatch, u.stage - 1});
        if (u.backward) {
          ok = need({false, u.microbatch, u.stage});
          if (ok && u.stage + 1 < shape.stages)
            ok = need({true, u.microbatch, u.stage + 1});
        }
        if (!ok)
          break;
        double d = durations.of(u);
        t.start[r].push_back(ready);
        t.finish[r].push_back(ready + d);
        at(u) = free[r] = ready + d;
        busy += d;
        t.makespan = std::max(t.makespan, free[r]);
        ++next[r];
        progress = true;
      }
    }
  }
  for (size_t r = 0; r < orders.size(); ++r)
    if (next[r] < orders[r].size()) {
      error = "pp rank " + std::to_string(r) + " would wait forever at " +
              describe(orders[r][next[r]]);
      return std::nullopt;
    }
  t.bubble =
      t.makespan > 0
          ? 1.0 - busy / (static_cast<double>(orders.size()) * t.makespan)
          : 0.0;
  return t;
}

int64_t kiln::pipeline::transferTag(Shape shape, int64_t microbatch,
                                    int64_t receivingStage, bool gradient) {
  return (microbatch * shape.stages + receivingStage) * 2 + (gradient ? 1 : 0);
}

int64_t kiln::pipeline::maxTransferTag(Shape shape) {
  return transferTag(shape, shape.microbatches - 1, shape.stages - 1, true);
}
