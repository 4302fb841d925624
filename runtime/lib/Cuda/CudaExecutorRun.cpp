//===- CudaExecutorRun.cpp - Running an entry on the GPU ------------------===//
//
// An entry's actions are built once (CudaActions.h); its first run enqueues
// them, its second is captured into a CUDA graph that later runs replay
// (or each run enqueues them again, without graphs or where capture
// fails). Inputs go through pinned memory, outputs come back the same way,
// and with numerics checking the device flag names the first non-finite
// result. With a trace, events around each action time it on the stream.
//
//===----------------------------------------------------------------------===//

#include "CudaExecutorState.h"

#include "kiln/Runtime/Cuda/KernelCompiler.h"
#include "kiln/Runtime/Cuda/OpKernels.h"
#include "kiln/Runtime/Numerics/Bf16.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace kiln::runtime::cuda {

Error CudaExecutor::State::traceActions(const std::string &name,
                                        const Entry &entry,
                                        Trace::Clock::time_point began) {
  if (entry.marks.size() != entry.actions.size() + 1)
    return Error::success();
  const std::vector<PlanStep> &steps = plan.entry(name)->steps;
  double at = 0; // milliseconds since the first mark
  for (size_t i = 0; i < entry.actions.size(); ++i) {
    float ms = 0;
    if (cudaError_t e =
            cudaEventElapsedTime(&ms, entry.marks[i], entry.marks[i + 1]);
        e != cudaSuccess)
      return Error(cudaProblem("timing an action", e));
    const Action &a = entry.actions[i];
    std::string what = std::string(actionCategory(a)) + ": ";
    if (!a.kernelName.empty())
      what += a.kernelName + " ";
    what += "op " + std::to_string(a.step) + ", " +
            (a.step < steps.size() ? describeStep(plan, steps[a.step]) : "");
    auto offset = [&](double milliseconds) {
      return began + std::chrono::duration_cast<Trace::Clock::duration>(
                         std::chrono::duration<double, std::milli>(
                             milliseconds));
    };
    trace->add(what, Trace::Compute, offset(at), offset(at + ms));
    at += ms;
  }
  return Error::success();
}

Error CudaExecutor::State::buildEntry(const std::string &name, Entry &entry) {
  ActionContext ctx;
  ctx.plan = &plan;
  ctx.values = this;
  ctx.ops = ops.get();
  ctx.groups = &groups;
  ctx.arch = arch;
  ctx.cacheDir = defaultKernelCacheDir();
  ctx.scratch = scratch;
  ctx.scratchBytes = scratchBytes;
  ctx.attention = attention.get();
  ctx.numericsFlag = checkNumerics ? numericsFlag : nullptr;
  Expected<std::vector<Action>> body = buildActions(ctx, name);
  if (!body)
    return body.takeError();
  const PlanEntry *e = plan.entry(name);
  if (checkNumerics) {
    Action clear;
    clear.kind = Action::Memset;
    clear.dst = numericsFlag;
    clear.bytes = sizeof(uint64_t);
    entry.actions.push_back(clear);
  }
  // The inputs come in from pinned memory and the outputs go out to it, in
  // the same stream order (and so inside a captured graph too).
  for (const PlanValue &v : plan.values)
    if (v.kind == PlanValue::Input) {
      Action copy;
      copy.kind = Action::Copy;
      copy.dst = at.at(v.id);
      copy.src = pinnedAt.at(v.id);
      copy.bytes = v.bytes();
      entry.actions.push_back(copy);
    }
  entry.actions.insert(entry.actions.end(), body->begin(), body->end());
  for (const auto &[out, id] : e->outputs) {
    Action copy;
    copy.kind = Action::Copy;
    copy.step = e->steps.empty() ? 0 : e->steps.size() - 1;
    copy.dst = pinnedAt.at(id);
    copy.src = address(id);
    copy.bytes = plan.values[id].bytes();
    entry.actions.push_back(copy);
  }
  if (checkNumerics) {
    Action copy;
    copy.kind = Action::Copy;
    copy.step = e->steps.empty() ? 0 : e->steps.size() - 1;
    copy.dst = numericsHost;
    copy.src = numericsFlag;
    copy.bytes = sizeof(uint64_t);
    entry.actions.push_back(copy);
  }
  return Error::success();
}

/// Enqueues an entry: as its actions on the first run (or always, without
/// graphs), else by replaying the graph captured on the second run.
Error CudaExecutor::State::launch(const std::string &name, Entry &entry,
                                  int64_t step) {
  // A traced run is eager, with events around each action (traceActions).
  bool replay = graphs && !entry.eagerOnly && entry.runs >= 1 && !trace;
  if (replay && !entry.graph) {
    cudaGraph_t graph = nullptr;
    std::string problem;
    if (cudaError_t e = cudaStreamBeginCapture(stream,
                                               cudaStreamCaptureModeThreadLocal);
        e != cudaSuccess)
      problem = cudaProblem("starting a capture", e);
    if (problem.empty()) {
      problem =
          enqueueActions(plan, name, entry.actions, *gemms, deviceAxes, stream)
              .takeMessage();
      cudaError_t e = cudaStreamEndCapture(stream, &graph);
      if (problem.empty() && e != cudaSuccess)
        problem = cudaProblem("capturing " + name, e);
    }
    if (problem.empty())
      if (cudaError_t e = cudaGraphInstantiate(&entry.graph, graph, 0);
          e != cudaSuccess)
        problem = cudaProblem("instantiating the graph of " + name, e);
    if (graph)
      cudaGraphDestroy(graph);
    if (!problem.empty()) {
      // Eager launches are correct too, only slower: say so once and go on.
      cudaGetLastError();
      entry.eagerOnly = true;
      entry.graph = nullptr;
      if (!warnedCapture)
        std::fprintf(stderr, "warning: %s runs without a CUDA graph: %s\n",
                     name.c_str(), problem.c_str());
      warnedCapture = true;
      replay = false;
    }
  }
  if (!replay) {
    if (trace && entry.marks.empty()) {
      entry.marks.resize(entry.actions.size() + 1);
      for (cudaEvent_t &m : entry.marks)
        if (cudaError_t e = cudaEventCreate(&m); e != cudaSuccess)
          return Error(cudaProblem("creating an event", e));
    }
    return enqueueActions(plan, name, entry.actions, *gemms, deviceAxes, stream,
                          trace ? &entry.marks : nullptr);
  }
  if (cudaError_t e = cudaGraphLaunch(entry.graph, stream); e != cudaSuccess)
    return Error(cudaProblem("replaying the graph of " + name, e));
  // The collectives inside the graph are not in the NCCL watchdog's list:
  // the replay as a whole is timed instead, so a stuck peer ends the run
  // with a line naming the rank and step rather than hanging the stream
  // sync that follows.
  if (nccl)
    return nccl->watchReplay(stream, "replay of " + name +
                                         " (a CUDA graph), "
                                         "step " +
                                         std::to_string(step));
  return Error::success();
}

Expected<EntryOutputs> CudaExecutor::run(const std::string &name,
                                         const std::vector<int32_t> &tokens,
                                         const std::vector<int32_t> &targets,
                                         int64_t step) {
  const Plan &plan = s->plan;
  if (!plan.entry(name)) {
    return Error("the plan has no entry '" + name + "'");
  }
  if (Error problem = s->prepare())
    return problem;
  // The kernels trust their indices: ids are checked here, as the CPU
  // backend's embedding and cross-entropy check them.
  for (const PlanValue &v : plan.values) {
    // The seed is the init entry's, which runs on the host (initialize):
    // no kernel reads it.
    if (v.kind != PlanValue::Input || v.name == "seed")
      continue;
    char *host = s->pinnedAt.at(v.id);
    if (v.name == "step") {
      std::memcpy(host, &step, sizeof step);
      continue;
    }
    if (v.name != "tokens" && v.name != "targets")
      return Error("the plan's input '" + v.name +
                   "' is not one the CUDA backend binds");
    const std::vector<int32_t> &ids = v.name == "tokens" ? tokens : targets;
    if (static_cast<int64_t>(ids.size()) != v.numElements()) {
      return Error("'" + v.name + "' has " + std::to_string(ids.size()) +
                   " ids; the plan takes " + std::to_string(v.numElements()));
    }
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < 0 || ids[i] >= plan.vocabSize) {
        return Error("token id " + std::to_string(ids[i]) + " at position " +
                     std::to_string(i) + " of '" + v.name +
                     "' is outside the vocabulary of " +
                     std::to_string(plan.vocabSize));
      }
    std::memcpy(host, ids.data(), ids.size() * sizeof(int32_t));
  }
  State::Entry &entry = s->entries[name];
  if (entry.actions.empty())
    if (Error problem = s->buildEntry(name, entry))
      return problem;
  Trace::Clock::time_point began = Trace::Clock::now();
  if (Error problem = s->launch(name, entry, step)) {
    cudaStreamSynchronize(s->stream);
    return problem;
  }
  if (cudaError_t e = cudaStreamSynchronize(s->stream); e != cudaSuccess) {
    return Error(cudaProblem("running " + name +
                                 " (run with --no-cuda-graphs and "
                                 "CUDA_LAUNCH_BLOCKING=1 to find the op)",
                             e));
  }
  ++entry.runs;
  if (s->checkNumerics)
    if (std::optional<NonFinite> bad = decodeNonFinite(*s->numericsHost)) {
      const std::vector<PlanStep> &steps = plan.entry(name)->steps;
      if (bad->step >= static_cast<int64_t>(steps.size())) {
        return Error("the numerics check of " + name + " names no step");
      }
      return Error("op " + std::to_string(bad->step) + " of " + name + ", " +
                   describeStep(plan, steps[bad->step]) + ": " +
                   bad->describe());
    }
  if (s->trace) {
    s->trace->add(name, Trace::Compute, began, Trace::Clock::now());
    if (Error problem = s->traceActions(name, entry, began))
      return problem;
  }
  s->noteMemory();

  EntryOutputs outputs;
  for (const auto &[out, id] : plan.entry(name)->outputs) {
    const PlanValue &v = plan.values[id];
    const char *host = s->pinnedAt.at(id);
    std::vector<float> &o = outputs[out];
    o.resize(v.numElements());
    if (v.dtype == DType::F32) {
      std::memcpy(o.data(), host, o.size() * sizeof(float));
    } else if (v.dtype == DType::BF16) {
      const auto *bits = reinterpret_cast<const uint16_t *>(host);
      for (size_t i = 0; i < o.size(); ++i)
        o[i] = numerics::fromBf16Bits(bits[i]);
    } else {
      return Error(std::string("output '") + out + "' is " +
                   dtypeName(v.dtype) + "; outputs are f32 or bf16");
    }
  }
  return outputs;
}

} // namespace kiln::runtime::cuda
