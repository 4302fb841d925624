//===- CpuExecutor.cpp - Runs a plan on the CPU ---------------------------===//

#include "kiln/Runtime/CpuExecutor.h"
#include "kiln/Runtime/Cpu/Bf16.h"
#include "kiln/Runtime/CpuFusedGroup.h"
#include "kiln/Runtime/CpuOps.h"
#include "kiln/Runtime/Init.h"

#include <cmath>
#include <cstring>

namespace kiln::runtime {

int64_t View::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

CpuExecutor::CpuExecutor(const Plan &plan) : planRef(plan) {}

std::unique_ptr<CpuExecutor> CpuExecutor::create(const Plan &plan,
                                                 std::string &error) {
  for (const auto &[name, entry] : plan.entries)
    for (const PlanStep &step : entry.steps)
      if (!step.group && step.op != "init" && !findCpuOp(step.op)) {
        error = "the CPU backend cannot run op '" + step.op + "' (" +
                name + ", " + step.loc + ")";
        return nullptr;
      }
  if (!plan.entry("init")) {
    error = "the plan has no 'init' entry";
    return nullptr;
  }
  std::unique_ptr<CpuExecutor> exec(new CpuExecutor(plan));
  for (const PlanValue &v : plan.values) {
    if (v.dtype == DType::F16 || v.dtype == DType::F64) {
      error = std::string("the CPU backend does not run ") +
              dtypeName(v.dtype) + " tensors (value " + std::to_string(v.id) +
              ")";
      return nullptr;
    }
    if (v.kind == PlanValue::State) {
      if (v.dtype != DType::F32) {
        error = "state '" + v.name + "' is " + dtypeName(v.dtype) +
                "; the CPU backend keeps state in f32";
        return nullptr;
      }
      exec->states[v.id].assign(v.numElements(), 0.0f);
    } else if (v.kind == PlanValue::Const) {
      exec->consts[v.id] = static_cast<float>(v.constValue);
    }
  }
  exec->arena.reset(new float[(plan.arenaBytes + 3) / 4 + 16]);
  return exec;
}

void CpuExecutor::initialize(uint64_t seed) {
  // The `init` entry: each step sets its result, a state, from the seed.
  for (const PlanStep &step : planRef.entry("init")->steps) {
    const PlanValue &v = planRef.values[step.results[0]];
    runtime::initialize(v.init, seed, v.name, 0, v.numElements(),
                        states[v.id].data());
  }
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
  cpu::fromBf16Bits(static_cast<const uint16_t *>(v.data), scratch.data(), n);
  return View{scratch.data(), DType::F32, v.shape};
}

void narrow(const float *from, const View &to) {
  cpu::toBf16Bits(from, static_cast<uint16_t *>(to.data), to.numElements());
}

/// "NaN in its result 0 at element 12", or empty when every float result is
/// finite.
std::string firstNonFinite(const std::vector<View> &results) {
  for (size_t r = 0; r < results.size(); ++r) {
    if (results[r].dtype != DType::F32)
      continue;
    const float *x = results[r].f32();
    for (int64_t e = 0, n = results[r].numElements(); e < n; ++e)
      if (!std::isfinite(x[e]))
        return std::string(std::isnan(x[e]) ? "NaN" : "infinity") +
               " in its result " + std::to_string(r) + " at element " +
               std::to_string(e);
  }
  return "";
}
} // namespace

/// The op, the first persistent tensor it reads, and its location (the
/// model component and the model file's line): "linear at
/// model.layers.0.mlp.down_proj at llama3-debug:8:1", "cast of
/// model.norm.weight at llama3-debug:2:2".
std::string CpuExecutor::describeStep(const PlanStep &step) const {
  std::string text = step.op;
  if (step.group && step.attrs.count("ops"))
    text = "fused group (" + step.str("ops") + ")";
  for (int64_t id : step.operands)
    if (planRef.values[id].kind == PlanValue::State) {
      text += " of " + planRef.values[id].name;
      break;
    }
  if (!step.loc.empty())
    text += " at " + step.loc;
  return text;
}

std::optional<std::map<std::string, std::vector<float>>>
CpuExecutor::run(const std::string &name, const std::vector<int32_t> &tokens,
                 const std::vector<int32_t> &targets, int64_t step,
                 std::string &error) {
  const PlanEntry *entry = planRef.entry(name);
  if (!entry) {
    error = "the plan has no entry '" + name + "'";
    return std::nullopt;
  }
  tokensBuf = tokens;
  targetsBuf = targets;
  stepValue = step;

  auto fail = [&](size_t i, const PlanStep &s, const std::string &failure) {
    error = "op " + std::to_string(i) + " of " + name + ", " +
            describeStep(s) + ": " + failure;
    return std::nullopt;
  };
  std::vector<std::vector<float>> scratch;
  for (size_t i = 0; i < entry->steps.size(); ++i) {
    const PlanStep &s = entry->steps[i];
    if (s.group) {
      // A fused group reads and writes every dtype itself.
      std::vector<View> operands, results;
      for (int64_t id : s.operands)
        operands.push_back(view(id));
      for (int64_t id : s.results)
        results.push_back(view(id));
      std::string failure =
          runFusedGroup(*s.group, operands, results, checkNumerics);
      if (!failure.empty())
        return fail(i, s, failure);
      continue;
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
    std::string failure = findCpuOp(s.op)(s, operands, results);
    if (failure.empty() && checkNumerics)
      failure = firstNonFinite(results);
    if (!failure.empty())
      return fail(i, s, failure);
    for (size_t k = 0; k < stored.size(); ++k)
      if (stored[k].data != results[k].data)
        narrow(results[k].f32(), stored[k]);
  }

  std::map<std::string, std::vector<float>> outputs;
  std::vector<float> tmp;
  for (const auto &[out, id] : entry->outputs) {
    View v = widened(view(id), tmp);
    outputs[out].assign(v.f32(), v.f32() + v.numElements());
  }
  return outputs;
}

} // namespace kiln::runtime
