//===- CudaActions.cpp - A plan entry as a list of device actions ---------===//
//
// Building the actions: each plan step becomes its device actions (a fused
// group's generated kernel, an op kernel's launches, a cuBLASLt GEMM, a
// collective's start or wait, a copy or nothing for a layout op), with
// every address resolved and the scratch of each step laid out. Enqueueing
// them: CudaActionsEnqueue.cpp.
//
//===----------------------------------------------------------------------===//

#include "CudaActions.h"

#include "kiln/Runtime/Cuda/GroupKernelSource.h"
#include "kiln/Runtime/Cuda/KernelCompiler.h"
#include "kiln/Runtime/Cuda/OpKernels.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <set>

namespace kiln::runtime::cuda {

std::string cudaProblem(const std::string &what, cudaError_t e) {
  return "CUDA error: " + what + " (" + cudaGetErrorString(e) + ")";
}

bool isGemm(plan::Op op) {
  return op == plan::Op::Linear || op == plan::Op::LinearGradInput ||
         op == plan::Op::LinearGradWeight || op == plan::Op::ScaledMatmul;
}

namespace {

int64_t lastDim(const PlanValue &v) { return v.shape.empty() ? 1 : v.shape.back(); }
int64_t rowsOf(const PlanValue &v) { return v.numElements() / lastDim(v); }

bool isCollectiveStart(plan::Op op) {
  return plan::category(op) == plan::Category::Collective;
}

/// reshape and unflatten move bytes only (Builder::layout).
bool isLayout(plan::Op op) {
  return op == plan::Op::Reshape || op == plan::Op::Unflatten;
}

uint64_t bitsOf(const void *p) { return reinterpret_cast<uint64_t>(p); }

/// Rounds scratch offsets up so that every use starts 256-byte aligned.
int64_t alignUp(int64_t n) { return (n + 255) / 256 * 256; }

class Builder {
public:
  Builder(const ActionContext &ctx, std::vector<Action> &out)
      : ctx(ctx), plan(*ctx.plan), out(out) {}

  Error step(size_t index, const PlanStep &s);
  /// Adamw steps that share one launch (adamwJoins), the first at `index`.
  Error adamwList(size_t index, const std::vector<const PlanStep *> &steps);
  /// With a numerics flag: the checks of the float results of step
  /// `index`, if it computes them (a fused group, a GEMM, a library op).
  Error checkFinite(size_t index, const PlanStep &s);

private:
  void *addr(int64_t id) const { return ctx.values->address(id); }
  const PlanValue &value(int64_t id) const { return plan.values[id]; }
  Error fused(const PlanStep &s);
  Error gemm(const PlanStep &s);
  Error kernelOp(const OpLaunchPlan &launches, const PlanStep &s) {
    return kernelOp(launches, std::vector<const PlanStep *>{&s});
  }
  /// The launches of a plan made for `steps` (one, but for adamwList).
  Error kernelOp(const OpLaunchPlan &launches,
                 const std::vector<const PlanStep *> &steps);
  /// One launch, its Operand and Result slots given by `address`.
  Error launchOf(const OpKernelLaunch &l,
                 const std::function<void *(const OpKernelArg &)> &address);
  Error collective(const PlanStep &s);
  Error wait(const PlanStep &s);
  Error layout(const PlanStep &s);
  /// An attention step as cuDNN's fused SDPA, when ctx.attention has its
  /// graph (CudnnAttention.h); false leaves it to the attention kernels.
  bool cudnnAttention(const PlanStep &s);

  /// A Launch of kernel `name` of `module` (looked up unless a dry run).
  Error launchAction(LoadedModule *module, const std::string &name,
                     Action *&act) {
    act = &add(Action::Launch);
    act->kernelName = name;
    if (ctx.dryRun)
      return Error::success();
    Expected<cudaKernel_t> kernel = module->kernel(name);
    if (!kernel)
      return kernel.takeError();
    act->kernel = *kernel;
    return Error::success();
  }

  Action &add(Action::Kind kind) {
    out.emplace_back();
    out.back().kind = kind;
    out.back().step = current;
    return out.back();
  }

  const ActionContext &ctx;
  const Plan &plan;
  std::vector<Action> &out;
  size_t current = 0;
  /// Collectives started but not yet waited for: their mean divisor.
  std::map<int64_t, int64_t> divisors;
  /// Those over an axis of one rank: a copy, with nothing to wait for.
  std::set<int64_t> copied;
};

Error Builder::step(size_t index, const PlanStep &s) {
  current = index;
  if (s.group)
    return fused(s);
  if (isGemm(s.kind))
    return gemm(s);
  if (isCollectiveStart(s.kind))
    return collective(s);
  if (s.kind == plan::Op::Wait)
    return wait(s);
  if (isLayout(s.kind))
    return layout(s);
  if (cudnnAttention(s))
    return Error::success();
  if (!isKernelOp(s.kind))
    return Error("the CUDA backend cannot run op '" + s.op + "'");
  Expected<OpLaunchPlan> launches =
      opLaunchPlan(plan, s, ctx.values->shardIndex());
  if (!launches)
    return launches.takeError();
  return kernelOp(*launches, s);
}

Error Builder::fused(const PlanStep &s) {
  Expected<GroupKernelSource> source = groupKernelSource(plan, s);
  if (!source)
    return source.takeError();
  LoadedModule *module = nullptr;
  if (!ctx.dryRun) {
    std::unique_ptr<LoadedModule> &loaded = (*ctx.groups)[source->source];
    if (!loaded) {
      Expected<CompiledKernel> cubin = compileKernel(
          source->source, ctx.arch, ctx.cacheDir, source->arithmetic);
      if (!cubin)
        return Error("NVRTC: " + cubin.error().message());
      Expected<std::unique_ptr<LoadedModule>> lib =
          LoadedModule::load(cubin->cubin);
      if (!lib)
        return lib.takeError();
      loaded = *std::move(lib);
    }
    module = loaded.get();
  }
  const FusedGroup &g = *s.group;
  // An amax output collects with atomicMax from zero.
  for (size_t o = 0; o < g.outputs.size(); ++o)
    if (g.outputs[o].store == GroupOutput::Store::Amax) {
      Action &z = add(Action::Memset);
      z.dst = addr(s.results[o]);
      z.bytes = value(s.results[o]).bytes();
    }
  // KilnArgs: the input pointers (at least one slot), the output pointers,
  // rows, cols, the column sums' partials; all 8-byte fields.
  std::vector<uint64_t> args;
  for (int64_t id : s.operands)
    args.push_back(bitsOf(addr(id)));
  if (s.operands.empty())
    args.push_back(0);
  for (int64_t id : s.results)
    args.push_back(bitsOf(addr(id)));
  args.push_back(static_cast<uint64_t>(g.rows));
  args.push_back(static_cast<uint64_t>(g.cols));
  args.push_back(bitsOf(ctx.scratch));
  Expected<GroupLaunch> geometry = groupLaunch(g);
  if (!geometry)
    return geometry.takeError();
  Action *launch = nullptr;
  if (Error problem = launchAction(module, "kiln_group", launch))
    return problem;
  launch->grid = {geometry->grid[0], geometry->grid[1], 1};
  launch->block = {geometry->block[0], geometry->block[1], 1};
  launch->args = args;
  if (source->hasColSum) {
    Action *sum = nullptr;
    if (Error problem = launchAction(module, "kiln_group_col_sum", sum))
      return problem;
    sum->grid = {geometry->sumGrid, 1, 1};
    sum->block = {geometry->sumBlock, 1, 1};
    sum->args = args;
    sum->hasExtra = true;
    sum->extra = geometry->partialBlocks;
  }
  return Error::success();
}

bool Builder::cudnnAttention(const PlanStep &s) {
  if (!ctx.attention || !isAttention(s.kind))
    return false;
  Expected<SdpaConfig> config = sdpaConfig(plan, s);
  const SdpaGraph *graph = config ? ctx.attention->find(*config) : nullptr;
  if (!graph)
    return false;
  Action &act = add(Action::Sdpa);
  act.sdpa = graph;
  act.kernelName =
      s.kind == plan::Op::Attention ? "cudnn_sdpa" : "cudnn_sdpa_backward";
  for (int64_t id : sdpaTensorIds(s))
    act.args.push_back(bitsOf(addr(id)));
  return true;
}

Error Builder::gemm(const PlanStep &s) {
  if (s.kind == plan::Op::ScaledMatmul) {
    // Operands: a [m, k], a_scale, b [n, k], b_scale (rank-0 or per row).
    const PlanValue &a = value(s.operands[0]), &b = value(s.operands[2]);
    Action &act = add(Action::Scaled);
    Gemms::Scaled &g = act.scaled;
    g.aType = a.dtype;
    g.bType = b.dtype;
    g.a = addr(a.id);
    g.b = addr(b.id);
    g.aScale = static_cast<const float *>(addr(s.operands[1]));
    g.bScale = static_cast<const float *>(addr(s.operands[3]));
    g.aRowwise = value(s.operands[1]).shape.size() == 1;
    g.bRowwise = value(s.operands[3]).shape.size() == 1;
    g.out = addr(s.results[0]);
    g.m = a.shape[0];
    g.k = a.shape[1];
    g.n = b.shape[0];
    // The plan says (kiln-fp8-linear sets it for the forward GEMM only,
    // as torchao's recipes do).
    g.fastAccumulation = s.flag("fast_accumulation");
    return Error::success();
  }
  const PlanValue &in0 = value(s.operands[0]), &in1 = value(s.operands[1]);
  const PlanValue &res = value(s.results[0]);
  if (in0.dtype != in1.dtype || in0.dtype != res.dtype ||
      (res.dtype != DType::BF16 && res.dtype != DType::F32))
    return Error(std::string("the CUDA backend runs ") + s.op +
                 " on bf16 or f32 operands of one dtype, not " +
                 dtypeName(in0.dtype) + " x " + dtypeName(in1.dtype) + " -> " +
                 dtypeName(res.dtype));
  Action &act = add(Action::Linear);
  act.dtype = res.dtype;
  act.a = addr(in0.id);
  act.b = addr(in1.id);
  act.c = addr(res.id);
  act.m = rowsOf(in0);
  if (s.kind == plan::Op::Linear) {
    // y [m, n] = x [m, k] W^T.
    act.gemm = Action::Gemm::Forward;
    act.k = lastDim(in0);
    act.n = in1.shape[0];
  } else if (s.kind == plan::Op::LinearGradInput) {
    // dx [m, k] = dy [m, n] W [n, k].
    act.gemm = Action::Gemm::GradInput;
    act.n = lastDim(in0);
    act.k = in1.shape[1];
  } else {
    // dW [n, k] = dy [m, n]^T x [m, k].
    act.gemm = Action::Gemm::GradWeight;
    act.n = lastDim(in0);
    act.k = lastDim(in1);
  }
  return Error::success();
}

Error Builder::adamwList(size_t index,
                         const std::vector<const PlanStep *> &steps) {
  current = index;
  Expected<OpLaunchPlan> launches = adamwListLaunchPlan(plan, steps);
  if (!launches)
    return launches.takeError();
  return kernelOp(*launches, steps);
}

Error Builder::kernelOp(const OpLaunchPlan &p,
                        const std::vector<const PlanStep *> &steps) {
  const PlanStep &s = *steps.front();
  if (p.scratchBytes > ctx.scratchBytes)
    return Error("needs " + std::to_string(p.scratchBytes) +
                 " bytes of scratch, more than was allocated");
  for (int r : p.zeroResults) {
    Action &z = add(Action::Memset);
    z.dst = addr(s.results[r]);
    z.bytes = value(s.results[r]).bytes();
  }
  if (p.scratchBytes > 0) {
    Action &z = add(Action::Memset);
    z.dst = ctx.scratch;
    z.bytes = p.scratchBytes;
  }
  for (const OpKernelLaunch &l : p.launches) {
    Error problem = launchOf(l, [&](const OpKernelArg &arg) {
      const PlanStep &of = *steps.at(arg.step);
      return addr(arg.kind == OpKernelArg::Operand ? of.operands.at(arg.index)
                                                   : of.results.at(arg.index));
    });
    if (problem)
      return problem;
  }
  return Error::success();
}

Error Builder::launchOf(
    const OpKernelLaunch &l,
    const std::function<void *(const OpKernelArg &)> &address) {
  if (l.args.size() > static_cast<size_t>(l.slots))
    return Error("an op kernel with more arguments than its slots");
  Action *launch = nullptr;
  if (Error problem = launchAction(ctx.ops, l.kernel, launch))
    return problem;
  Action &act = *launch;
  act.grid = {static_cast<unsigned>(l.grid), 1, 1};
  act.block = {static_cast<unsigned>(l.block), 1, 1};
  act.shared = static_cast<unsigned>(l.sharedBytes);
  act.args.assign(l.slots, 0);
  for (size_t i = 0; i < l.args.size(); ++i) {
    const OpKernelArg &arg = l.args[i];
    uint64_t &slot = act.args[i];
    switch (arg.kind) {
    case OpKernelArg::Operand:
    case OpKernelArg::Result:
      slot = bitsOf(address(arg));
      break;
    case OpKernelArg::Scratch:
      slot = bitsOf(static_cast<char *>(ctx.scratch) + arg.index);
      break;
    case OpKernelArg::Int:
      slot = static_cast<uint64_t>(arg.i);
      break;
    case OpKernelArg::Float:
      static_assert(sizeof(double) == sizeof(uint64_t));
      std::memcpy(&slot, &arg.f, sizeof slot);
      break;
    }
  }
  return Error::success();
}

/// reshape and unflatten move bytes only: a copy, or nothing when the
/// result is the operand's own memory.
Error Builder::checkFinite(size_t index, const PlanStep &s) {
  if (!ctx.numericsFlag)
    return Error::success();
  // As the CPU backend: every step but collectives and the shard ops.
  bool computes = s.group || isGemm(s.kind) ||
                  (isKernelOp(s.kind) &&
                   plan::category(s.kind) != plan::Category::ShardCast);
  if (!computes)
    return Error::success();
  current = index;
  for (size_t r = 0; r < s.results.size(); ++r) {
    const PlanValue &v = value(s.results[r]);
    if (v.dtype == DType::I32 || v.dtype == DType::I64 || v.numElements() == 0)
      continue;
    std::optional<OpKernelLaunch> l = nonFiniteCheckLaunch(
        v.dtype, v.numElements(), static_cast<int64_t>(index),
        static_cast<int>(r));
    if (!l)
      return Error("too many steps or results for the numerics check");
    if (Error problem = launchOf(*l, [&](const OpKernelArg &arg) {
          return arg.index == 0 ? addr(v.id) : ctx.numericsFlag;
        }))
      return problem;
  }
  return Error::success();
}

Error Builder::layout(const PlanStep &s) {
  const PlanValue &in = value(s.operands[0]), &res = value(s.results[0]);
  if (in.dtype != res.dtype)
    return Error(std::string("a ") + s.op + " from " + dtypeName(in.dtype) +
                 " to " + dtypeName(res.dtype));
  int64_t offset = s.kind == plan::Op::Unflatten ? s.i64("offset") : 0;
  const char *from = static_cast<const char *>(addr(in.id)) +
                     offset * dtypeBytes(in.dtype);
  if (from == addr(res.id))
    return Error::success();
  Action &act = add(Action::Copy);
  act.dst = addr(res.id);
  act.src = from;
  act.bytes = res.bytes();
  return Error::success();
}

Error Builder::collective(const PlanStep &s) {
  const PlanValue &in = value(s.operands[0]), &res = value(s.results[0]);
  std::optional<plan::Axis> axis = plan::parseAxis(s.str("axis"));
  if (!axis)
    return Error("a collective over no mesh axis ('" + s.str("axis") + "')");
  if (plan.mesh.axisSize(*axis) == 1) {
    // Over one rank every collective gives its input back (the mean's
    // divisor is 1): a copy, which the loader checked has the result's size.
    divisors[res.id] = 1;
    copied.insert(res.id);
    if (addr(in.id) == addr(res.id))
      return Error::success();
    Action &act = add(Action::Copy);
    act.dst = addr(res.id);
    act.src = addr(in.id);
    act.bytes = res.bytes();
    return Error::success();
  }
  Action &act = add(Action::Collective);
  act.collective = s.kind;
  act.axis = *axis;
  act.resultId = res.id;
  act.src = addr(in.id);
  act.dst = addr(res.id);
  // An all-gather copies: FP8 codes go as bytes and i32 token ids as
  // 4-byte words (F32), bit for bit.
  act.element = in.dtype == DType::BF16 ? comm::ElementType::BF16
                : isFp8(in.dtype)      ? comm::ElementType::U8
                                       : comm::ElementType::F32;
  std::string reduction = s.attrs.count("reduction") ? s.str("reduction") : "";
  act.reduce = reduction == "max" ? comm::ReduceOp::Max : comm::ReduceOp::Sum;
  act.shift = s.attrs.count("shift") ? static_cast<int>(s.i64("shift")) : 0;
  act.count = s.kind == plan::Op::ReduceScatterStart ? res.numElements()
                                                      : in.numElements();
  divisors[res.id] = reduction == "mean" ? s.i64("ranks") : 1; // the axis's
  return Error::success();
}

Error Builder::wait(const PlanStep &s) {
  auto it = divisors.find(s.operands[0]);
  if (it == divisors.end())
    return Error("waits for a collective that was not started");
  int64_t divisor = it->second;
  divisors.erase(it);
  if (copied.erase(s.operands[0]))
    return Error::success();
  Action &act = add(Action::Wait);
  act.resultId = s.operands[0];
  if (divisor == 1)
    return Error::success();
  // A mean: the sum divided by the rank count, in place in the result
  // (the wait's result is the collective's buffer).
  const PlanValue &res = value(s.results[0]);
  return kernelOp(meanDivideLaunch(res.dtype, res.numElements(), divisor), s);
}

} // namespace

Expected<int64_t> scratchBytesNeeded(const Plan &plan, int shardIndex) {
  int64_t most = 0;
  for (const auto &[name, entry] : plan.entries)
    for (const PlanStep &s : entry.steps) {
      if (s.group) {
        Expected<GroupLaunch> geometry = groupLaunch(*s.group);
        if (!geometry)
          return Error(name + ", " + describeStep(plan, s) + ": " +
                       geometry.error().message());
        most = std::max(most, alignUp(geometry->partialBytes));
      } else if (isKernelOp(s.kind) && !isLayout(s.kind)) {
        Expected<OpLaunchPlan> p = opLaunchPlan(plan, s, shardIndex);
        if (!p)
          return Error(name + ", " + describeStep(plan, s) + ": " +
                       p.error().message());
        most = std::max(most, alignUp(p->scratchBytes));
      }
    }
  return most;
}

int64_t fallbackScratchBytes(const Plan &plan) {
  int64_t most = 0;
  for (const auto &[name, entry] : plan.entries)
    for (const PlanStep &s : entry.steps)
      if (!s.group && s.kind == plan::Op::ScaledMatmul)
        most = std::max(most, plan.values[s.results[0]].numElements() *
                                  int64_t(sizeof(float)));
  return most;
}

Expected<std::vector<Action>> buildActions(const ActionContext &ctx,
                                           const std::string &entry) {
  const PlanEntry *e = ctx.plan->entry(entry);
  std::vector<Action> actions;
  Builder builder(ctx, actions);
  for (size_t i = 0; i < e->steps.size(); ++i) {
    const PlanStep &s = e->steps[i];
    if (s.kind == plan::Op::Init)
      continue;
    // AdamW over all the parameters whose updates follow one another.
    std::vector<const PlanStep *> run = {&s};
    while (i + run.size() < e->steps.size() &&
           adamwJoins(*ctx.plan, s, e->steps[i + run.size()]))
      run.push_back(&e->steps[i + run.size()]);
    Error problem =
        run.size() > 1 ? builder.adamwList(i, run) : builder.step(i, s);
    for (size_t k = 0; k < run.size() && !problem; ++k)
      problem = builder.checkFinite(i + k, *run[k]);
    if (problem)
      return Error("op " + std::to_string(i) + " of " + entry + ", " +
                   describeStep(*ctx.plan, s) + ": " + problem.message());
    i += run.size() - 1;
  }
  return actions;
}

} // namespace kiln::runtime::cuda
