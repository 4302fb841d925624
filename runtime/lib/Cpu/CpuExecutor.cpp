//===- CpuExecutor.cpp - Runs a plan on the CPU ---------------------------===//

#include "kiln/Runtime/Cpu/CpuExecutor.h"
#include "kiln/Runtime/Cpu/Bf16.h"
#include "kiln/Runtime/Cpu/Fp8.h"
#include "kiln/Runtime/Comm/Communicator.h"
#include "kiln/Runtime/Cpu/CpuFusedGroup.h"
#include "kiln/Runtime/Cpu/CpuOps.h"
#include "kiln/Runtime/MemoryCheck.h"
#include "kiln/Runtime/Cpu/Common.h"

#include <cmath>
#include <cstring>
#include <new>

namespace kiln::runtime {

int64_t View::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

CpuExecutor::CpuExecutor(const Plan &plan) : planRef(plan) {}

namespace {
bool isCollective(const PlanStep &step) {
  return plan::category(step.kind) == plan::Category::Collective;
}
} // namespace

Expected<std::unique_ptr<CpuExecutor>> CpuExecutor::create(const Plan &plan) {
  // Every op of a verified plan is one this backend runs (plan/Format.h);
  // the dtypes are checked here.
  std::string machine;
  if (std::optional<int64_t> available = hostAvailableBytes(machine))
    if (Error why = memoryShortfall(plan, cpuBackendBytes(plan), *available,
                                    machine, kCpuBackendBuffers))
      return why;
  std::unique_ptr<CpuExecutor> exec(new CpuExecutor(plan));
  for (const PlanValue &v : plan.values) {
    if (v.dtype == DType::F16 || v.dtype == DType::F64) {
      return Error(std::string("the CPU backend does not run ") +
                   dtypeName(v.dtype) + " tensors (value " +
                   std::to_string(v.id) + ")");
    }
    if (v.kind == PlanValue::State && v.dtype != DType::F32) {
      return Error("state '" + v.name + "' is " + dtypeName(v.dtype) +
                   "; the CPU backend keeps state in f32");
    }
    if (v.kind == PlanValue::Const) {
      exec->consts[v.id] = static_cast<float>(v.constValue);
    }
  }
  // The check above leaves what the kernel overcommits or other processes
  // take meanwhile: an allocation can still fail, and says so.
  try {
    exec->states = zeroStates(plan);
    exec->arenaFloats = (plan.arenaBytes + 3) / 4;
    exec->arena.reset(new float[exec->arenaFloats]);
  } catch (const std::bad_alloc &) {
    return Error("out of memory allocating the plan's state and arena (" +
                 formatBytes(plan.stateBytes + plan.arenaBytes) + ")");
  }
  return exec;
}

Error CpuExecutor::setCommunicator(comm::Communicator *c) {
  if (Error wrong = checkRunFits(planRef, c))
    return wrong;
  communicator = c;
  rankIndex = c ? c->rank() : 0;
  shardIndex =
      static_cast<int>(planRef.mesh.axisIndex(plan::Axis::DpShard, rankIndex));
  if (c) {
    Expected<comm::AxisCommunicators> split = comm::splitMesh(
        *c, planRef.mesh.pp, planRef.mesh.dpShard, planRef.mesh.tp);
    if (!split)
      return split.takeError();
    axes = *std::move(split);
  }
  return Error::success();
}

int64_t CpuExecutor::allocatedBytes() const {
  int64_t bytes = arenaFloats * static_cast<int64_t>(sizeof(float));
  for (const auto &[id, data] : states)
    bytes += static_cast<int64_t>(data.size() * sizeof(float));
  return bytes;
}

std::string CpuExecutor::describe() const {
  return "CPU, " + std::to_string(cpu::cpuThreads()) + " threads";
}

Error CpuExecutor::initialize(uint64_t seed) {
  initializeStates(planRef, shardIndex, seed, states);
  return Error::success();
}

Expected<std::vector<FloatTensor>> CpuExecutor::unshardedState() {
  return unshardedStates(planRef, states, axes.dpShard, axes.tp);
}

Error CpuExecutor::setUnshardedState(
    const std::map<std::string, const FloatTensor *> &byName) {
  return setUnshardedStates(planRef, shardIndex, byName, states);
}

namespace {
/// What a collective moves each element as. An all-gather copies, so FP8
/// codes go as bytes and i32 token ids as 4-byte words (F32), bit for bit.
comm::ElementType commType(DType dtype) {
  return dtype == DType::BF16 ? comm::ElementType::BF16
         : isFp8(dtype)       ? comm::ElementType::U8
                              : comm::ElementType::F32;
}
} // namespace

Error CpuExecutor::startTransfer(const PlanStep &step) {
  bool send = step.kind == plan::Op::PipeSendStart;
  View data = view(send ? step.operands[0] : step.results[0]);
  Pending p;
  p.comm = axes.pp;
  p.track = Trace::PpCommunication;
  int peer = static_cast<int>(step.i64("peer"));
  int tag = static_cast<int>(step.i64("tag"));
  p.name = std::string(send ? "send to " : "recv from ") + "pp " +
           std::to_string(peer) + " tag " + std::to_string(tag);
  p.started = Trace::Clock::now();
  p.handle = send ? p.comm->startSend(data.data, data.numElements(),
                                      commType(data.dtype), peer, tag)
                  : p.comm->startRecv(data.data, data.numElements(),
                                      commType(data.dtype), peer, tag);
  pending[step.results[0]] = p;
  return Error::success();
}

Error CpuExecutor::startCollective(const PlanStep &step) {
  if (step.kind == plan::Op::PipeSendStart ||
      step.kind == plan::Op::PipeRecvStart)
    return startTransfer(step);
  View in = view(step.operands[0]), out = view(step.results[0]);
  comm::ElementType type = commType(in.dtype);
  Pending p;
  plan::Axis axis = *plan::parseAxis(step.str("axis"));
  p.comm = axis == plan::Axis::Tp   ? axes.tp
           : axis == plan::Axis::Pp ? axes.pp
                                    : axes.dpShard;
  p.track = axis == plan::Axis::Tp   ? Trace::TpCommunication
            : axis == plan::Axis::Pp ? Trace::PpCommunication
                                     : Trace::Communication;
  p.name = step.op.substr(0, step.op.size() - 6) + // drop "_start"
           (step.attrs.count("group") ? " " + step.str("group") : "");
  p.started = Trace::Clock::now();
  std::string reduction =
      step.attrs.count("reduction") ? step.str("reduction") : "";
  comm::ReduceOp op =
      reduction == "max" ? comm::ReduceOp::Max : comm::ReduceOp::Sum;
  if (reduction == "mean")
    p.divisor = step.i64("ranks"); // the axis's size
  if (step.kind == plan::Op::AllGatherStart)
    p.handle =
        p.comm->startAllGather(in.data, out.data, in.numElements(), type);
  else if (step.kind == plan::Op::ReduceScatterStart)
    p.handle = p.comm->startReduceScatter(in.data, out.data, out.numElements(),
                                          type, op);
  else if (step.kind == plan::Op::SendRecvStart)
    p.handle = p.comm->startSendRecv(in.data, out.data, in.numElements(), type,
                                     static_cast<int>(step.i64("shift")));
  else
    p.handle =
        p.comm->startAllReduce(in.data, out.data, in.numElements(), type, op);
  pending[step.results[0]] = p;
  return Error::success();
}

void CpuExecutor::traceCompleted() {
  for (auto &[id, p] : pending)
    if (!p.recorded && p.comm->test(p.handle)) {
      trace->add(p.name, p.track, p.started, Trace::Clock::now());
      p.recorded = true;
    }
}

Error CpuExecutor::waitCollective(const PlanStep &step) {
  auto it = pending.find(step.operands[0]);
  if (it == pending.end())
    return Error("waits for a collective that was not started");
  Pending p = it->second;
  pending.erase(it);
  if (Error failure = p.comm->wait(p.handle))
    return Error(p.name + ": " + failure.message());
  if (trace && !p.recorded)
    trace->add(p.name, p.track, p.started, Trace::Clock::now());
  if (p.divisor != 1) {
    // A mean: the sum (rounded to its dtype) divided by the rank count in
    // f32, then rounded to the dtype again.
    View r = view(step.results[0]);
    float n = static_cast<float>(p.divisor);
    if (r.dtype == DType::F32) {
      for (int64_t i = 0, e = r.numElements(); i < e; ++i)
        r.f32()[i] /= n;
    } else {
      uint16_t *bits = static_cast<uint16_t *>(r.data);
      for (int64_t i = 0, e = r.numElements(); i < e; ++i)
        bits[i] = cpu::toBf16Bits(cpu::fromBf16Bits(bits[i]) / n);
    }
  }
  return Error::success();
}

std::vector<float> *CpuExecutor::state(const std::string &name) {
  const PlanValue *v = planRef.named(PlanValue::State, name);
  return v ? &states[v->id] : nullptr;
}

View CpuExecutor::view(int64_t id) {
  const PlanValue &v = planRef.values[id];
  View out{nullptr, v.dtype, v.shape};
  switch (v.kind) {
  case PlanValue::State:
    out.data = states[id].data();
    break;
  case PlanValue::Const:
    out.data = &consts[id];
    break;
  case PlanValue::Arena:
    out.data = reinterpret_cast<char *>(arena.get()) + v.offset;
    break;
  case PlanValue::Input:
    out.data = v.name == "step"      ? static_cast<void *>(&stepValue)
               : v.name == "tokens" ? static_cast<void *>(tokensBuf.data())
                                     : static_cast<void *>(targetsBuf.data());
    break;
  }
  return out;
}

namespace {
bool isFloat(DType t) { return t != DType::I32 && t != DType::I64; }

/// A float view of `v`: itself if f32, else a widened copy in `scratch`.
View widened(const View &v, std::vector<float> &scratch) {
  if (!isFloat(v.dtype) || v.dtype == DType::F32)
    return v;
  int64_t n = v.numElements();
  scratch.resize(n);
  if (isFp8(v.dtype)) {
    const uint8_t *codes = static_cast<const uint8_t *>(v.data);
    float (*decode)(uint8_t) =
        v.dtype == DType::F8E4M3 ? cpu::fromE4m3 : cpu::fromE5m2;
    for (int64_t i = 0; i < n; ++i)
      scratch[i] = decode(codes[i]);
  } else {
    cpu::fromBf16Bits(static_cast<const uint16_t *>(v.data), scratch.data(),
                      n);
  }
  return View{scratch.data(), DType::F32, v.shape};
}

void narrow(const float *from, const View &to) {
  int64_t n = to.numElements();
  if (isFp8(to.dtype)) {
    uint8_t *codes = static_cast<uint8_t *>(to.data);
    uint8_t (*encode)(float) =
        to.dtype == DType::F8E4M3 ? cpu::toE4m3 : cpu::toE5m2;
    for (int64_t i = 0; i < n; ++i)
      codes[i] = encode(from[i]);
    return;
  }
  cpu::toBf16Bits(from, static_cast<uint16_t *>(to.data), n);
}

/// "NaN in its result 0 at element 12", or success when every float result
/// is finite, as stored (a finite f32 past bf16's range is an infinity).
Error firstNonFinite(const std::vector<View> &results) {
  for (size_t r = 0; r < results.size(); ++r) {
    const View &v = results[r];
    if (!isFloat(v.dtype))
      continue;
    const float *f32 = v.dtype == DType::F32 ? v.f32() : nullptr;
    for (int64_t e = 0, n = v.numElements(); e < n; ++e) {
      float x = f32 ? f32[e] : loadScalar(v, e); // f32: no decoding
      if (!std::isfinite(x))
        return Error(std::string(std::isnan(x) ? "NaN" : "infinity") +
                     " in its result " + std::to_string(r) + " at element " +
                     std::to_string(e));
    }
  }
  return Error::success();
}
} // namespace

/// One step: a collective, a fused group, or a library op on f32 views.
Error CpuExecutor::runStep(const PlanStep &s,
                           std::vector<std::vector<float>> &scratch) {
  switch (plan::category(s.kind)) {
  case plan::Category::Collective:
  case plan::Category::Wait:
    if (!communicator)
      return Error("a collective needs a communicator");
    return s.kind == plan::Op::Wait ? waitCollective(s) : startCollective(s);
  case plan::Category::ShardCast:
    // The FP8 all-gather's casts depend on the rank's place in the flat
    // buffer, which the executor knows.
    return runShardOp(s, scratch);
  case plan::Category::Init:
    return Error("init steps run through initialize()");
  default:
    break;
  }
  if (s.group) {
    // A fused group reads and writes every dtype itself.
    std::vector<View> operands, results;
    for (int64_t id : s.operands)
      operands.push_back(view(id));
    for (int64_t id : s.results)
      results.push_back(view(id));
    return runFusedGroup(*s.group, operands, results, checkNumerics);
  }
  size_t count = s.operands.size() + s.results.size();
  if (scratch.size() < count)
    scratch.resize(count);
  std::vector<View> operands, results, stored;
  for (size_t k = 0; k < s.operands.size(); ++k)
    operands.push_back(widened(view(s.operands[k]), scratch[k]));
  for (size_t k = 0; k < s.results.size(); ++k) {
    View r = view(s.results[k]);
    stored.push_back(r);
    if (isFloat(r.dtype) && r.dtype != DType::F32) {
      std::vector<float> &buf = scratch[s.operands.size() + k];
      buf.resize(r.numElements());
      r = View{buf.data(), DType::F32, r.shape};
    }
    results.push_back(r);
  }
  if (Error e = findCpuOp(s.kind)(s, operands, results))
    return e;
  for (size_t k = 0; k < stored.size(); ++k)
    if (stored[k].data != results[k].data)
      narrow(results[k].f32(), stored[k]);
  return checkNumerics ? firstNonFinite(stored) : Error::success();
}

Error CpuExecutor::runShardOp(const PlanStep &s,
                              std::vector<std::vector<float>> &scratch) {
  if (scratch.empty())
    scratch.resize(1);
  View shard = widened(view(s.operands[0]), scratch[0]);
  const auto &offsets = std::get<std::vector<int64_t>>(s.attrs.at("offsets"));
  const auto &sizes = std::get<std::vector<int64_t>>(s.attrs.at("sizes"));
  std::vector<cpu::FlatRange> weights;
  for (size_t i = 0; i < offsets.size(); ++i)
    weights.push_back({offsets[i], sizes[i]});
  int64_t n = shard.numElements(), first = shardIndex * n;
  if (s.kind == plan::Op::ShardAmax) {
    cpu::shardAmax(shard.f32(), n, first, weights.data(),
                   static_cast<int64_t>(weights.size()),
                   view(s.results[0]).f32());
    return Error::success();
  }
  View codes = view(s.results[0]);
  if (codes.dtype != DType::F8E4M3)
    return Error("shard_quantize writes f8e4m3 codes");
  cpu::shardQuantizeE4m3(shard.f32(), n, first, weights.data(),
                         static_cast<int64_t>(weights.size()),
                         view(s.operands[1]).f32(),
                         static_cast<uint8_t *>(codes.data),
                         view(s.results[1]).f32());
  return Error::success();
}

Expected<EntryOutputs> CpuExecutor::run(const std::string &name,
                                        const std::vector<int32_t> &tokens,
                                        const std::vector<int32_t> &targets,
                                        int64_t step) {
  const PlanEntry *entry = planRef.entry(name);
  if (!entry) {
    return Error("the plan has no entry '" + name + "'");
  }
  tokensBuf = tokens;
  targetsBuf = targets;
  stepValue = step;

  auto fail = [&](size_t i, const PlanStep &s, const std::string &failure) {
    return Error("op " + std::to_string(i) + " of " + name + ", " +
                 describeStep(planRef, s) + ": " + failure);
  };
  std::vector<std::vector<float>> scratch;
  // The pipeline unit being traced: its name, first and last compute step.
  std::string unit;
  Trace::Clock::time_point unitBegan, unitEnded;
  auto endUnit = [&] {
    if (trace && !unit.empty())
      trace->add(unit, Trace::PipelineUnit, unitBegan, unitEnded);
    unit.clear();
  };
  for (size_t i = 0; i < entry->steps.size(); ++i) {
    const PlanStep &s = entry->steps[i];
    Trace::Clock::time_point began;
    if (trace)
      began = Trace::Clock::now();
    if (Error e = runStep(s, scratch))
      return fail(i, s, e.message());
    if (trace) {
      if (!isCollective(s) && s.kind != plan::Op::Wait) {
        Trace::Clock::time_point ended = Trace::Clock::now();
        trace->add(s.group && s.attrs.count("ops")
                       ? "fused (" + s.str("ops") + ")"
                       : s.op,
                   Trace::Compute, began, ended);
        std::string mine =
            s.attrs.count("kiln.unit") ? s.str("kiln.unit") : std::string();
        if (mine != unit) {
          endUnit();
          unit = mine;
          unitBegan = began;
        }
        unitEnded = ended;
      }
      if (communicator)
        traceCompleted();
    }
  }
  endUnit();

  EntryOutputs outputs;
  std::vector<float> tmp;
  for (const auto &[out, id] : entry->outputs) {
    View v = widened(view(id), tmp);
    outputs[out].assign(v.f32(), v.f32() + v.numElements());
  }
  return outputs;
}

} // namespace kiln::runtime
