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
// - every collective runs over its step's mesh axis, its buffers sized by
//   that axis's rank count (not the world's) and its element type its
//   input's dtype;
// - every collective started is waited for, once, after it starts;
// - enqueued through one recording communicator per mesh axis (as the
//   executor's, of the plan's ranks at this rank's positions), each
//   collective step over an axis of several ranks starts on that axis's
//   communicator, in order, with its buffers, count, type and reduction,
//   and is stream-waited once by the same communicator on the compute
//   stream (checkRouting);
// - with --cudnn-attention (as if cuDNN had built a graph for every
//   attention step that SdpaConfig.h maps), every tensor of a cuDNN SDPA
//   action is its step's value, whole: q, k, v, out and lse, then dout,
//   dq, dk and dv, each spanning the bytes of its dims in the config.
//
// Prints per entry the count of each kind of action, and of the AdamW list
// launches and the parameters they update, the count per category of a
// traced run's breakdown (actionCategory), and, with collectives, their
// count and bytes per mesh axis. Checks the first and the last rank at the
// plan's tp position (--rank R: that one). Exits 1 on the first problem.
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
  FakeDevice(const Plan &plan, int shard, int64_t scratchBytes)
      : plan(plan), shard(shard) {
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
  int shardIndex() const override { return shard; }

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
  int shard;
  uintptr_t next = uintptr_t{1} << 44;
  char *arena = nullptr;
  std::map<int64_t, char *> at;
  std::map<uintptr_t, std::pair<uintptr_t, std::string>> regions;
};

struct Counts {
  int launches = 0, groupLaunches = 0, memsets = 0, copies = 0, gemms = 0,
      scaled = 0, collectives = 0, adamwLists = 0, adamwParams = 0,
      numericsChecks = 0, sdpa = 0;
  /// Per mesh axis (dp_shard, tp): collectives, and the bytes of each
  /// rank's chunk summed.
  int axisCollectives[2] = {0, 0};
  int64_t axisBytes[2] = {0, 0};
};

/// The communicator element type of a value of dtype `t`.
comm::ElementType elementOf(DType t) {
  return t == DType::BF16 ? comm::ElementType::BF16
         : isFp8(t)       ? comm::ElementType::U8
                          : comm::ElementType::F32;
}

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
    plan::Axis axis = *plan::parseAxis(s.str("axis"));
    if (a.axis != axis)
      return std::string("a collective over ") + plan::axisName(axis) +
             " runs over " + plan::axisName(a.axis);
    if (a.element != elementOf(plan.values.at(s.operands.at(0)).dtype))
      return "a collective whose element type is not its input's dtype";
    int64_t bytes = a.count * static_cast<int64_t>(comm::elementBytes(a.element));
    // Chunks of `bytes` from each rank of the axis, not of the world.
    int64_t all = bytes * plan.mesh.axisSize(axis);
    c.axisCollectives[axis == plan::Axis::Tp] += 1;
    c.axisBytes[axis == plan::Axis::Tp] += bytes;
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

/// One mesh axis's communicator for enqueueActions on the host: records
/// each collective started on it and each streamWait, runs nothing.
class RecordingComm final : public comm::NcclCommunicator {
public:
  struct Start {
    plan::Op op;
    const void *send;
    void *recv;
    int64_t count;
    comm::ElementType type;
    comm::ReduceOp reduce;
  };
  RecordingComm(int size, int rank) : size_(size), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char *backendName() const override { return "recording"; }
  comm::CommHandle startAllGather(const void *send, void *recv, int64_t count,
                                  comm::ElementType type) override {
    return record({plan::Op::AllGatherStart, send, recv, count, type,
                   comm::ReduceOp::Sum});
  }
  comm::CommHandle startReduceScatter(const void *send, void *recv,
                                      int64_t count, comm::ElementType type,
                                      comm::ReduceOp op) override {
    return record({plan::Op::ReduceScatterStart, send, recv, count, type, op});
  }
  comm::CommHandle startAllReduce(const void *send, void *recv, int64_t count,
                                  comm::ElementType type,
                                  comm::ReduceOp op) override {
    return record({plan::Op::AllReduceStart, send, recv, count, type, op});
  }
  comm::CommHandle startSendRecv(const void *send, void *recv, int64_t count,
                                 comm::ElementType type, int) override {
    return record({plan::Op::SendRecvStart, send, recv, count, type,
                   comm::ReduceOp::Sum});
  }
  Error wait(comm::CommHandle) override {
    return Error("the executor never waits on the host");
  }
  bool test(comm::CommHandle) override { return false; }
  Error barrier() override { return Error("no barrier in an entry"); }
  Error failure() const override { return Error::success(); }
  int device() const override { return 0; }
  Communicator &host() override { return *this; }
  void setProducerStream(cudaStream_t stream) override { producer = stream; }
  Error streamWait(comm::CommHandle h, cudaStream_t stream) override {
    if (h.id == 0 || h.id > starts.size())
      return Error("a stream wait for a handle this axis did not issue");
    waits.push_back({h.id, stream});
    return Error::success();
  }
  cudaStream_t stream() const override { return nullptr; }
  Error watchReplay(cudaStream_t, const std::string &) override {
    return Error("no replay on the host");
  }

  std::vector<Start> starts; // handle i + 1 is starts[i]
  std::vector<std::pair<uint64_t, cudaStream_t>> waits;
  cudaStream_t producer = nullptr;

private:
  comm::CommHandle record(const Start &s) {
    starts.push_back(s);
    return {starts.size()};
  }
  int size_, rank_;
};

/// Never called: the routing check enqueues collectives and waits only.
class NoGemms final : public Gemms {
public:
  Error linear(DType, const void *, const void *, void *, int64_t, int64_t,
               int64_t, cudaStream_t) override {
    return Error("a GEMM");
  }
  Error linearGradInput(DType, const void *, const void *, void *, int64_t,
                        int64_t, int64_t, cudaStream_t) override {
    return Error("a GEMM");
  }
  Error linearGradWeight(DType, const void *, const void *, void *, int64_t,
                         int64_t, int64_t, cudaStream_t) override {
    return Error("a GEMM");
  }
  Error scaledMatmul(const Scaled &, cudaStream_t) override {
    return Error("a GEMM");
  }
  Error reserveFallbackScratch(int64_t) override { return Error::success(); }
  int64_t deviceBytes() const override { return 0; }
  int cachedAlgorithms() const override { return 0; }
  int scaleEpilogueProblems() const override { return 0; }
};

/// Enqueues the collectives and waits of `actions` (what runs without a
/// GPU) through one recording communicator per axis of more than one rank,
/// as the executor sets them up, and checks against the entry's steps
/// themselves: each collective step over an axis of several ranks starts
/// on that axis's communicator, in step order, with its input and result
/// whole (the count of elements of its input's dtype per rank) and its
/// reduction; each is stream-waited once, on the compute stream, by the
/// communicator that started it; both communicators produce after the
/// compute stream. Empty, or the first problem.
std::string checkRouting(const Plan &plan, const std::string &name,
                         const FakeDevice &d,
                         const std::vector<Action> &actions, int rank) {
  std::vector<Action> comms;
  for (const Action &a : actions)
    if (a.kind == Action::Collective || a.kind == Action::Wait)
      comms.push_back(a);
  const PlanMesh &mesh = plan.mesh;
  RecordingComm dp(static_cast<int>(mesh.dpShard),
                   static_cast<int>(mesh.axisIndex(plan::Axis::DpShard, rank))),
      tp(static_cast<int>(mesh.tp),
         static_cast<int>(mesh.axisIndex(plan::Axis::Tp, rank)));
  AxisComms axes;
  axes.dpShard = mesh.dpShard > 1 ? &dp : nullptr;
  axes.tp = mesh.tp > 1 ? &tp : nullptr;
  // A made-up compute stream: nothing is launched on it.
  auto *compute = reinterpret_cast<cudaStream_t>(uintptr_t{0x5eed});
  NoGemms gemms;
  if (Error e = enqueueActions(plan, name, comms, gemms, axes, compute))
    return "enqueueing the collectives: " + e.message();
  size_t next[2] = {0, 0};
  for (const PlanStep &s : plan.entry(name)->steps) {
    if (plan::category(s.kind) != plan::Category::Collective)
      continue;
    plan::Axis axis = *plan::parseAxis(s.str("axis"));
    if (mesh.axisSize(axis) == 1)
      continue; // a copy (Builder::collective)
    RecordingComm &on = axis == plan::Axis::Tp ? tp : dp;
    size_t &i = next[axis == plan::Axis::Tp];
    std::string where = describeStep(plan, s) + ": ";
    if (i >= on.starts.size())
      return where + "not started on the " + plan::axisName(axis) +
             " communicator";
    const RecordingComm::Start &got = on.starts[i++];
    const PlanValue &in = plan.values.at(s.operands.at(0)),
                    &res = plan.values.at(s.results.at(0));
    int64_t count = s.kind == plan::Op::ReduceScatterStart ? res.numElements()
                                                           : in.numElements();
    std::string reduction =
        s.attrs.count("reduction") ? s.str("reduction") : "";
    comm::ReduceOp reduce =
        reduction == "max" ? comm::ReduceOp::Max : comm::ReduceOp::Sum;
    if (got.op != s.kind || got.send != d.address(in.id) ||
        got.recv != d.address(res.id) || got.count != count ||
        got.type != elementOf(in.dtype) ||
        (s.kind != plan::Op::AllGatherStart && got.reduce != reduce))
      return where + "the " + plan::axisName(axis) +
             " communicator's collective " + std::to_string(i) +
             " is not this step's (op, buffers, count, type or reduction)";
  }
  for (auto [axis, on] :
       {std::pair{plan::Axis::DpShard, &dp}, std::pair{plan::Axis::Tp, &tp}}) {
    std::string what =
        std::string("the ") + plan::axisName(axis) + " communicator";
    if (next[axis == plan::Axis::Tp] != on->starts.size())
      return what + " started " + std::to_string(on->starts.size()) +
             " collectives; the steps have " +
             std::to_string(next[axis == plan::Axis::Tp]);
    std::set<uint64_t> waited;
    for (auto [id, stream] : on->waits)
      if (stream != compute || !waited.insert(id).second)
        return what + "'s collective " + std::to_string(id) +
               " is waited for twice or not by the compute stream";
    if (waited.size() != on->starts.size())
      return what + " has collectives no stream waits for";
    if (!on->starts.empty() && on->producer != compute)
      return what + " does not start after the compute stream's work";
  }
  return "";
}

/// Checks every entry of `plan` on `rank`; 0, or 1 after printing why.
int checkPlan(const std::string &path, const Plan &plan, int rank,
              bool numerics, bool cudnn) {
  // The flat shards' piece is the rank's dp_shard position.
  const int shard =
      static_cast<int>(plan.mesh.axisIndex(plan::Axis::DpShard, rank));
  Expected<int64_t> needed = scratchBytesNeeded(plan, shard);
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
  FakeDevice device(plan, shard, scratchBytes);
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
    if (std::string problem = checkRouting(plan, name, device, *actions, rank);
        !problem.empty()) {
      std::fprintf(stderr, "%s: rank %d %s: %s\n", path.c_str(), rank,
                   name.c_str(), problem.c_str());
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
    if (c.collectives > 0)
      std::printf("%s rank %d %s collectives: dp_shard %d over %lld ranks "
                  "(%lld bytes a rank), tp %d over %lld ranks (%lld bytes a "
                  "rank)\n",
                  path.c_str(), rank, name.c_str(), c.axisCollectives[0],
                  static_cast<long long>(plan.mesh.dpShard),
                  static_cast<long long>(c.axisBytes[0]), c.axisCollectives[1],
                  static_cast<long long>(plan.mesh.tp),
                  static_cast<long long>(c.axisBytes[1]));
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
    // The shard ops differ per rank: the first and the last of the ranks
    // at the plan's tp position (one plan per position, checkRunFits).
    const int tp = static_cast<int>(plan->mesh.tp),
              position = static_cast<int>(plan->tpIndex);
    std::set<int> ranks = {position,
                           static_cast<int>(plan->ranks - tp + position)};
    if (onlyRank >= 0)
      ranks = {onlyRank};
    for (int rank : ranks)
      if (rank < 0 || rank >= plan->ranks || rank % tp != position) {
        std::fprintf(stderr, "%s: rank %d does not run this plan\n",
                     path.c_str(), rank);
        return 1;
      }
    for (int rank : ranks)
      if (int rc = checkPlan(path, *plan, rank, numerics, cudnn))
        return rc;
  }
  return 0;
}
