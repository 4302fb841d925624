//===- ActionsCheck.cpp - The CUDA executor's actions, built on the host --===//
//
//   kiln-cuda-actions-check [--check-numerics] [--cudnn-attention]
//                           [--rank R] PLAN...
//
// Builds every entry of each plan into the CUDA executor's device actions
// (buildActions, CudaActions.h) as a dry run: no GPU, no kernel compiled
// or loaded, device addresses made up (the arena, each state, constant and
// input value, the step scratch and the numerics flag each a region of its
// own size, far apart). Then checks what a GPU would otherwise be first to
// find:
//
// - every GEMM operand and result, FP8 scale and collective buffer is its
//   step's value, whole: the address and the bytes the GEMM's m, n, k (or
//   the collective's count) imply;
// - every memset and copy lies inside one region;
// - every pointer a fused-group launch passes (KilnArgs) lies in a region;
// - every launch fits a launch: at most 1024 threads a block, grid y and z
//   at most 65535, an op kernel's slots those of its parameter type;
// - every collective started is waited for, once, after it starts;
// - with --cudnn-attention (as if cuDNN had built a graph for every
//   attention step that SdpaConfig.h maps), every tensor of a cuDNN SDPA
//   action is its step's value, whole: q, k, v, out and lse, then dout,
//   dq, dk and dv, each spanning the bytes of its dims in the config.
//
// Prints per entry the count of each kind of action, and of the AdamW list
// launches and the parameters they update, and the count per category of a
// traced run's breakdown (actionCategory). Exits 1 on the first problem.
//
//===----------------------------------------------------------------------===//

#include "../../lib/Cuda/CudaActions.h"

#include "kiln/Runtime/Cuda/OpKernels.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace kiln::runtime;
using namespace kiln::runtime::cuda;
namespace plan = kiln::plan;

namespace {

/// Made-up device memory: regions far apart, each named.
class FakeDevice final : public DeviceValues {
public:
  FakeDevice(const Plan &plan, int rank, int64_t scratchBytes) : plan(plan), rankIndex(rank) {
    arena = region("the arena", plan.arenaBytes);
    for (const PlanValue &v : plan.values)
      if (v.kind != PlanValue::Arena)
        at[v.id] = region("'" + v.name + "'", v.bytes());
    scratch = region("the scratch", scratchBytes);
    flag = region("the numerics flag", 8);
  }

  void *address(int64_t id) const override {
    const PlanValue &v = plan.values[id];
    return v.kind == PlanValue::Arena ? arena + v.offset : at.at(id);
  }
  int rank() const override { return rankIndex; }

  /// Empty when [p, p + bytes) is inside one region, else why not.
  std::string inside(const void *p, int64_t bytes,
                     const std::string &what) const {
    auto a = reinterpret_cast<uintptr_t>(p);
    auto it = regions.upper_bound(a);
    if (it != regions.begin()) {
      --it;
      const auto &[end, name] = it->second;
      if (a >= it->first && bytes >= 0 && a + bytes <= end)
        return "";
      if (a >= it->first && a < end)
        return what + " runs past the end of " + name + " (" +
               std::to_string(a + bytes - end) + " bytes)";
    }
    return what + " points at no buffer";
  }

  /// Empty when `p` is value `id`'s address and `bytes` its size, else
  /// why not (a GEMM or collective reads and writes whole values).
  std::string isValue(int64_t id, const void *p, int64_t bytes,
                      const std::string &what) const {
    const PlanValue &v = plan.values[id];
    if (p != address(id))
      return what + " is not at value " + std::to_string(id) + "'s address";
    if (bytes != v.bytes())
      return what + " spans " + std::to_string(bytes) + " bytes; value " +
             std::to_string(id) + " has " + std::to_string(v.bytes());
    return "";
  }

  char *scratch = nullptr, *flag = nullptr;

private:
  char *region(const std::string &name, int64_t bytes) {
    char *p = reinterpret_cast<char *>(next);
    regions[next] = {next + static_cast<uintptr_t>(std::max<int64_t>(bytes, 0)),
                     name};
    next += (static_cast<uintptr_t>(std::max<int64_t>(bytes, 0)) /
                 kRegionAlign +
             1) *
            kRegionAlign;
    return p;
  }

  static constexpr uintptr_t kRegionAlign = uintptr_t{1} << 40;
  const Plan &plan;
  int rankIndex;
  uintptr_t next = uintptr_t{1} << 44;
  char *arena = nullptr;
  std::map<int64_t, char *> at;
  std::map<uintptr_t, std::pair<uintptr_t, std::string>> regions;
};

struct Counts {
  int launches = 0, groupLaunches = 0, memsets = 0, copies = 0, gemms = 0,
      scaled = 0, collectives = 0, adamwLists = 0, adamwParams = 0,
      numericsChecks = 0, sdpa = 0;
};

/// The dry run's cuDNN: a graph for every configuration (never run).
class EverySdpa final : public SdpaGraphs {
public:
  const SdpaGraph *find(const SdpaConfig &) const override {
    return reinterpret_cast<const SdpaGraph *>(&marker);
  }

private:
  char marker = 0;
};

/// A cuDNN SDPA action's tensors against its step's values.
std::string checkSdpa(const Plan &plan, const PlanStep &s, const FakeDevice &d,
                      const Action &a) {
  Expected<SdpaConfig> c = sdpaConfig(plan, s);
  if (!c)
    return "a cuDNN SDPA action for a step it does not map: " +
           c.error().message();
  bool fwd = s.kind == plan::Op::Attention;
  // q k v out lse (dout dq dk dv), by the step's operand and result
  // positions.
  std::vector<int64_t> ids =
      fwd ? std::vector<int64_t>{s.operands.at(0), s.operands.at(1),
                                 s.operands.at(2), s.results.at(0),
                                 s.results.at(1)}
          : std::vector<int64_t>{
                s.operands.at(1), s.operands.at(2), s.operands.at(3),
                s.operands.at(4), s.operands.at(5), s.operands.at(0),
                s.results.at(0),  s.results.at(1),  s.results.at(2)};
  if (a.args.size() != ids.size() || !a.sdpa || c->backward == fwd)
    return "a cuDNN SDPA action with " + std::to_string(a.args.size()) +
           " tensors for " + s.op;
  auto bytes = [](const SdpaTensor &t, int64_t element) {
    return t.dim[0] * t.dim[1] * t.dim[2] * t.dim[3] * element;
  };
  int64_t q = bytes(c->query(), 2), kv = bytes(c->keyValue(), 2),
          stats = bytes(c->stats(), 4);
  const std::vector<int64_t> spans = {q, kv, kv, q, stats, q, q, kv, kv};
  const char *names[] = {"q", "k", "v", "out", "lse", "dout", "dq", "dk", "dv"};
  for (size_t i = 0; i < ids.size(); ++i)
    if (std::string p =
            d.isValue(ids[i], reinterpret_cast<void *>(a.args[i]), spans[i],
                      std::string("cuDNN SDPA's ") + names[i]);
        !p.empty())
      return p;
  return "";
}

/// Checks one action; empty when it is sound.
std::string checkAction(const Plan &plan, const PlanStep &s,
                        const FakeDevice &d, const Action &a, Counts &c) {
  switch (a.kind) {
  case Action::Launch: {
    ++c.launches;
    if (a.block.x * a.block.y * a.block.z > 1024 || a.block.x == 0 ||
        a.grid.x == 0 || a.grid.y > 65535 || a.grid.z > 65535 ||
        a.shared > 48 * 1024)
      return "a launch of " + a.kernelName + " that no GPU takes";
    if (a.kernelName == "kiln_group" || a.kernelName == "kiln_group_col_sum") {
      ++c.groupLaunches;
      // KilnArgs: pointers, then rows and cols, then the partials.
      for (size_t i = 0; i + 3 < a.args.size(); ++i)
        if (a.args[i] != 0)
          if (std::string p = d.inside(reinterpret_cast<void *>(a.args[i]), 1,
                                       a.kernelName + " argument " +
                                           std::to_string(i));
              !p.empty())
            return p;
      return "";
    }
    int slots = a.kernelName == "kiln_adamw_list" ? kMaxOpKernelListArgs
                                                   : kMaxOpKernelArgs;
    if (static_cast<int>(a.args.size()) != slots)
      return a.kernelName + " gets " + std::to_string(a.args.size()) +
             " slots, not " + std::to_string(slots);
    if (a.kernelName == "kiln_adamw_list") {
      ++c.adamwLists;
      c.adamwParams += static_cast<int>(a.args[1]);
    }
    if (a.kernelName == "kiln_check_finite")
      ++c.numericsChecks;
    return "";
  }
  case Action::Memset:
    ++c.memsets;
    return d.inside(a.dst, a.bytes, "a memset");
  case Action::Copy:
    ++c.copies;
    if (std::string p = d.inside(a.dst, a.bytes, "a copy's destination");
        !p.empty())
      return p;
    return d.inside(a.src, a.bytes, "a copy's source");
  case Action::Linear: {
    ++c.gemms;
    int64_t e = dtypeBytes(a.dtype), m = a.m, n = a.n, k = a.k;
    // Forward: x [m, k], W [n, k] -> y [m, n]; GradInput: dy [m, n],
    // W [n, k] -> dx [m, k]; GradWeight: dy [m, n], x [m, k] -> dW [n, k].
    int64_t aBytes = a.gemm == Action::Gemm::Forward ? m * k : m * n;
    int64_t bBytes = a.gemm == Action::Gemm::GradWeight ? m * k : n * k;
    int64_t cBytes = a.gemm == Action::Gemm::Forward      ? m * n
                     : a.gemm == Action::Gemm::GradInput ? m * k
                                                         : n * k;
    for (auto [id, p, bytes, what] :
         {std::tuple{s.operands.at(0), a.a, aBytes, "the GEMM's first operand"},
          std::tuple{s.operands.at(1), a.b, bBytes,
                     "the GEMM's second operand"},
          std::tuple{s.results.at(0), static_cast<const void *>(a.c), cBytes,
                     "the GEMM's result"}})
      if (std::string problem = d.isValue(id, p, bytes * e, what);
          !problem.empty())
        return problem;
    return "";
  }
  case Action::Scaled: {
    ++c.scaled;
    const Gemms::Scaled &g = a.scaled;
    for (auto [id, p, bytes, what] :
         {std::tuple{s.operands.at(0), g.a, g.m * g.k,
                     "the scaled GEMM's first operand"},
          std::tuple{s.operands.at(2), g.b, g.n * g.k,
                     "the scaled GEMM's second operand"},
          std::tuple{s.operands.at(1), static_cast<const void *>(g.aScale),
                     4 * (g.aRowwise ? g.m : 1),
                     "the scaled GEMM's first scale"},
          std::tuple{s.operands.at(3), static_cast<const void *>(g.bScale),
                     4 * (g.bRowwise ? g.n : 1),
                     "the scaled GEMM's second scale"},
          std::tuple{s.results.at(0), static_cast<const void *>(g.out),
                     2 * g.m * g.n, "the scaled GEMM's result"}})
      if (std::string problem = d.isValue(id, p, bytes, what);
          !problem.empty())
        return problem;
    return "";
  }
  case Action::Collective: {
    ++c.collectives;
    int64_t bytes = a.count * static_cast<int64_t>(comm::elementBytes(a.element));
    int64_t all = bytes * plan.ranks;
    int64_t in = a.collective == plan::Op::ReduceScatterStart ? all : bytes;
    int64_t out = a.collective == plan::Op::AllGatherStart ? all : bytes;
    std::string name = plan::name(a.collective);
    if (std::string p =
            d.isValue(s.operands.at(0), a.src, in, name + "'s input");
        !p.empty())
      return p;
    return d.isValue(s.results.at(0), a.dst, out, name + "'s result");
  }
  case Action::Wait:
    return "";
  case Action::Sdpa:
    ++c.sdpa;
    return checkSdpa(plan, s, d, a);
  }
  return "an action of no known kind";
}

/// Checks every entry of `plan` on `rank`; 0, or 1 after printing why.
int checkPlan(const std::string &path, const Plan &plan, int rank,
              bool numerics, bool cudnn) {
  Expected<int64_t> needed = scratchBytesNeeded(plan, rank);
  if (!needed) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(),
                 needed.error().message().c_str());
    return 1;
  }
  int64_t scratchBytes = *needed;
  // Both scratch buffers are sized from the plan before any entry runs
  // (so before any graph capture), and never move.
  std::printf("%s rank %d: scratch %lld bytes, GEMM fallback scratch %lld "
              "bytes\n",
              path.c_str(), rank, static_cast<long long>(scratchBytes),
              static_cast<long long>(fallbackScratchBytes(plan)));
  FakeDevice device(plan, rank, scratchBytes);
  ActionContext ctx;
  ctx.plan = &plan;
  ctx.values = &device;
  ctx.scratch = device.scratch;
  ctx.scratchBytes = scratchBytes;
  ctx.numericsFlag = numerics ? device.flag : nullptr;
  ctx.dryRun = true;
  EverySdpa everySdpa;
  ctx.attention = cudnn ? &everySdpa : nullptr;
  for (const auto &[name, entry] : plan.entries) {
    if (name == "init") // run on the host (StateLayout.h), not as actions
      continue;
    Expected<std::vector<Action>> actions = buildActions(ctx, name);
    if (!actions) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(),
                   actions.error().message().c_str());
      return 1;
    }
    Counts c;
    std::set<int64_t> started;
    std::map<std::string, int> categories; // as a traced run names them
    for (const Action &a : *actions) {
      ++categories[actionCategory(a)];
      std::string problem =
          checkAction(plan, entry.steps.at(a.step), device, a, c);
      if (problem.empty() && a.kind == Action::Collective &&
          !started.insert(a.resultId).second)
        problem = "a collective started twice";
      if (problem.empty() && a.kind == Action::Wait &&
          started.erase(a.resultId) != 1)
        problem = "a wait for a collective that was not started";
      if (!problem.empty()) {
        const PlanStep &s = entry.steps.at(a.step);
        std::fprintf(stderr, "%s: op %zu of %s, %s: %s\n", path.c_str(),
                     a.step, name.c_str(), describeStep(plan, s).c_str(),
                     problem.c_str());
        return 1;
      }
    }
    if (!started.empty()) {
      std::fprintf(stderr, "%s: %s: %zu collectives are never waited for\n",
                   path.c_str(), name.c_str(), started.size());
      return 1;
    }
    std::printf("%s rank %d %s: %zu actions: %d launches (%d of fused groups), "
                "%d memsets, %d copies, %d GEMMs, %d FP8 GEMMs, %d "
                "collectives; AdamW: %d list launches over %d parameters; %d "
                "numerics checks; %d cuDNN SDPA\n",
                path.c_str(), rank, name.c_str(), actions->size(), c.launches,
                c.groupLaunches, c.memsets, c.copies, c.gemms, c.scaled,
                c.collectives, c.adamwLists, c.adamwParams, c.numericsChecks,
                c.sdpa);
    std::printf("%s rank %d %s categories:", path.c_str(), rank, name.c_str());
    for (const auto &[category, count] : categories)
      std::printf(" %s %d;", category.c_str(), count);
    std::printf("\n");
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  bool numerics = false, cudnn = false;
  int onlyRank = -1;
  std::vector<std::string> plans;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--check-numerics") == 0)
      numerics = true;
    else if (std::strcmp(argv[i], "--cudnn-attention") == 0)
      cudnn = true;
    else if (std::strcmp(argv[i], "--rank") == 0 && i + 1 < argc)
      onlyRank = std::atoi(argv[++i]);
    else
      plans.push_back(argv[i]);
  }
  if (plans.empty()) {
    std::fprintf(stderr, "usage: kiln-cuda-actions-check [--check-numerics] "
                         "[--cudnn-attention] [--rank R] PLAN...\n");
    return 1;
  }
  for (const std::string &path : plans) {
    std::string error;
    Expected<Plan> plan = loadPlan(path);
    if (!plan) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(),
                   plan.error().message().c_str());
      return 1;
    }
    // The shard ops differ per rank: the first and the last.
    std::set<int> ranks = {0, static_cast<int>(plan->ranks - 1)};
    if (onlyRank >= 0)
      ranks = {onlyRank};
    for (int rank : ranks)
      if (int rc = checkPlan(path, *plan, rank, numerics, cudnn))
        return rc;
  }
  return 0;
}
