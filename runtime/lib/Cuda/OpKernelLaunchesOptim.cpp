//===- OpKernelLaunchesOptim.cpp - Launches of the loss and optimizer ops -===//
//
// The launches of cross-entropy, the gradient norm, the schedule, AdamW and
// the FP8 bookkeeping ops (the rest: OpKernelLaunches.cpp). Ops whose
// attributes are lists (grad_norm's operands, the shard ops' weights) run
// as several launches, since a launch has 16 argument slots.
//
//===----------------------------------------------------------------------===//

#include "OpLaunchArgs.h"

#include <algorithm>

namespace kiln::runtime::cuda {

namespace {

using namespace launch;

constexpr int64_t kSumSquaresChunk = 16384; // KILN_SUMSQ_CHUNK
constexpr size_t kSumSquaresTensors = 6;     // (pointer, n) pairs per launch
constexpr int64_t kAdamWChunk = 4096;        // KILN_ADAMW_CHUNK

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

OpKernelLaunch gridStride(const std::string &kernel, int64_t n, int64_t most,
                          std::vector<Arg> args) {
  return {kernel, std::clamp<int64_t>(ceilDiv(n, 256), 1, most), 256, 0,
          std::move(args)};
}

OpKernelLaunch oneThread(const std::string &kernel, std::vector<Arg> args) {
  return {kernel, 1, 1, 0, std::move(args)};
}

using Result = std::optional<OpLaunchPlan>;

struct Step {
  const Plan &plan;
  const PlanStep &step;
  std::string &error;
  const PlanValue &in(size_t i) const { return plan.values[step.operands[i]]; }
  const PlanValue &out(size_t i) const { return plan.values[step.results[i]]; }
  Result fail(const std::string &why) const {
    error = step.op + ": " + why;
    return std::nullopt;
  }
  /// Empty when the counts are these and the listed values are f32.
  bool shaped(size_t operands, size_t results, size_t maxOperands,
              std::initializer_list<int> f32Operands,
              std::initializer_list<int> f32Results) const {
    size_t n = step.operands.size();
    if (n < operands || n > std::max(operands, maxOperands) ||
        step.results.size() != results) {
      fail("has " + std::to_string(n) + " operands and " +
           std::to_string(step.results.size()) + " results");
      return false;
    }
    for (int i : f32Operands)
      if (in(i).dtype != DType::F32) {
        fail("operand " + std::to_string(i) + " is " + dtypeName(in(i).dtype) +
             ", not f32");
        return false;
      }
    for (int i : f32Results)
      if (out(i).dtype != DType::F32) {
        fail("result " + std::to_string(i) + " is " +
             dtypeName(out(i).dtype) + ", not f32");
        return false;
      }
    return true;
  }
};

bool isFloat(DType t) {
  return t == DType::F32 || t == DType::BF16 || isFp8(t);
}

Result crossEntropy(const Step &s, bool grad) {
  // Operands: logits, targets (grad: dloss, logits, targets).
  int logits = grad ? 1 : 0;
  if (!s.shaped(grad ? 3 : 2, 1, 0, {}, {}))
    return std::nullopt;
  const PlanValue &x = s.in(logits), &targets = s.in(logits + 1);
  if (!isFloat(x.dtype) || !isFloat(s.out(0).dtype) ||
      (grad && !isFloat(s.in(0).dtype)))
    return s.fail("needs float logits and results");
  if (targets.dtype != DType::I32)
    return s.fail("needs i32 targets");
  if (x.shape.empty() || x.shape.back() <= 0)
    return s.fail("needs logits [..., vocab]");
  int64_t vocab = x.shape.back(), rows = x.numElements() / vocab;
  if (targets.numElements() != rows)
    return s.fail("needs a target per row");
  OpLaunchPlan p;
  if (rows == 0)
    return p;
  if (grad) {
    p.launches.push_back(
        {"kiln_cross_entropy_grad", rows, 256, 0,
         {operand(0), code(s.in(0).dtype), operand(1), code(x.dtype),
          operand(2), result(0), code(s.out(0).dtype), integer(rows),
          integer(vocab)}});
    return p;
  }
  p.scratchBytes = rows * 8; // each row's loss, in double
  p.launches.push_back({"kiln_cross_entropy_rows", rows, 256, 0,
                        {operand(0), code(x.dtype), operand(1), scratch(0),
                         integer(vocab)}});
  p.launches.push_back({"kiln_cross_entropy_total", 1, 256, 0,
                        {scratch(0), integer(rows), result(0),
                         code(s.out(0).dtype)}});
  return p;
}

Result gradNorm(const Step &s) {
  size_t count = s.step.operands.size();
  if (!s.shaped(1, 1, 1 << 20, {}, {0}))
    return std::nullopt;
  OpLaunchPlan p;
  int64_t partials = 0;
  for (size_t first = 0; first < count; first += kSumSquaresTensors) {
    size_t last = std::min(count, first + kSumSquaresTensors);
    std::vector<Arg> args = {scratch(0), integer(partials),
                             integer(static_cast<int64_t>(last - first))};
    int64_t chunks = 0;
    for (size_t i = first; i < last; ++i) {
      if (s.in(i).dtype != DType::F32)
        return s.fail("operand " + std::to_string(i) + " is " +
                      dtypeName(s.in(i).dtype) + ", not f32");
      int64_t n = s.in(i).numElements();
      args.push_back(operand(static_cast<int64_t>(i)));
      args.push_back(integer(n));
      chunks += ceilDiv(n, kSumSquaresChunk);
    }
    if (chunks > 0)
      p.launches.push_back({"kiln_sum_squares", chunks, 256, 0, args});
    partials += chunks;
  }
  p.scratchBytes = std::max<int64_t>(8, partials * 8);
  p.launches.push_back({"kiln_grad_norm", 1, 256, 0,
                        {scratch(0), integer(partials), result(0),
                         integer(s.step.flag("squared"))}});
  return p;
}

/// The attributes AdamW reads.
constexpr const char *kAdamWAttrs[] = {"beta1", "beta2", "eps", "weight_decay",
                                       "max_norm"};

/// The launch of the step's scalars: operands 4 (grad norm), 5 (lr), 6
/// (step) of `s`, into 8 floats of scratch.
OpKernelLaunch adamwScalars(const PlanStep &s) {
  return oneThread(
      "kiln_adamw_scalars",
      {operand(4), operand(5), operand(6), scratch(0), real(s.f64("beta1")),
       real(s.f64("beta2")), real(s.f64("eps")), real(s.f64("weight_decay")),
       real(s.f64("max_norm"))});
}

Result adamw(const Step &s) {
  // Operands: param, grad, exp_avg, exp_avg_sq, grad_norm, lr, step;
  // results: param, exp_avg, exp_avg_sq (maybe the operands' buffers).
  if (!s.shaped(7, 3, 0, {0, 2, 3, 4, 5}, {0, 1, 2}))
    return std::nullopt;
  if (!isFloat(s.in(1).dtype) || s.in(6).dtype != DType::I64)
    return s.fail("needs a float gradient and an i64 step");
  int64_t n = s.in(0).numElements();
  for (int i : {1, 2, 3})
    if (s.in(i).numElements() != n)
      return s.fail("operand " + std::to_string(i) +
                    " has another size than the parameter");
  for (int i : {0, 1, 2})
    if (s.out(i).numElements() != n)
      return s.fail("result " + std::to_string(i) +
                    " has another size than the parameter");
  OpLaunchPlan p;
  p.scratchBytes = 8 * 4; // the step's scalars
  p.launches.push_back(adamwScalars(s.step));
  if (n > 0)
    p.launches.push_back(gridStride(
        "kiln_adamw", n, 4096,
        {operand(0), operand(1), code(s.in(1).dtype), operand(2), operand(3),
         result(0), result(1), result(2), scratch(0), integer(n)}));
  return p;
}

/// The weights of a shard op: (offset, size) in the flat buffer.
std::optional<std::vector<std::pair<int64_t, int64_t>>>
shardWeights(const Step &s) {
  const auto &offsets =
      std::get<std::vector<int64_t>>(s.step.attrs.at("offsets"));
  const auto &sizes = std::get<std::vector<int64_t>>(s.step.attrs.at("sizes"));
  if (offsets.size() != sizes.size()) {
    s.fail("needs as many offsets as sizes");
    return std::nullopt;
  }
  std::vector<std::pair<int64_t, int64_t>> weights;
  for (size_t i = 0; i < offsets.size(); ++i)
    weights.push_back({offsets[i], sizes[i]});
  return weights;
}

Result shardOp(const Step &s, int rank) {
  bool quantize = s.step.kind == plan::Op::ShardQuantize;
  if (!s.shaped(quantize ? 2 : 1, quantize ? 2 : 1, 0, {},
                quantize ? std::initializer_list<int>{1}
                         : std::initializer_list<int>{0}))
    return std::nullopt;
  if (!isFloat(s.in(0).dtype))
    return s.fail("needs a float shard");
  if (quantize && s.out(0).dtype != DType::F8E4M3)
    return s.fail("writes f8e4m3 codes");
  if (quantize && s.out(1).dtype != DType::F32)
    return s.fail("writes f32 scales");
  auto weights = shardWeights(s);
  if (!weights)
    return std::nullopt;
  int64_t count = static_cast<int64_t>(weights->size());
  const PlanValue &amax = quantize ? s.in(1) : s.out(0);
  if (amax.numElements() != count ||
      (quantize && s.out(1).numElements() != count))
    return s.fail("needs an amax and a scale per weight");
  int64_t n = s.in(0).numElements(), first = rank * n;
  if (quantize && s.out(0).numElements() != n)
    return s.fail("needs as many codes as shard elements");
  OpLaunchPlan p;
  p.zeroResults = {0};
  if (quantize)
    p.launches.push_back(gridStride("kiln_shard_scales", count, 64,
                                    {operand(1), result(1), integer(count)}));
  for (int64_t i = 0; i < count; ++i) {
    // The part of weight i inside this rank's [first, first + n).
    auto [offset, size] = (*weights)[i];
    int64_t begin = std::max(offset, first);
    int64_t end = std::min(offset + size, first + n);
    if (end <= begin)
      continue;
    if (quantize)
      p.launches.push_back(gridStride(
          "kiln_shard_quantize", end - begin, 1024,
          {operand(0), code(s.in(0).dtype), integer(begin - first),
           integer(end - begin), result(1), integer(i), result(0)}));
    else
      p.launches.push_back(gridStride(
          "kiln_shard_amax", ceilDiv(end - begin, 4), 1024,
          {operand(0), code(s.in(0).dtype), integer(begin - first),
           integer(end - begin), result(0), integer(i)}));
  }
  return p;
}

} // namespace

std::optional<OpLaunchPlan> optimLaunchPlan(const Plan &plan,
                                            const PlanStep &step, int rank,
                                            std::string &error) {
  Step s{plan, step, error};
  switch (step.kind) {
  case plan::Op::CrossEntropy:
    return crossEntropy(s, false);
  case plan::Op::CrossEntropyGrad:
    return crossEntropy(s, true);
  case plan::Op::GradNorm:
    return gradNorm(s);
  case plan::Op::AdamW:
    return adamw(s);
  case plan::Op::ShardAmax:
  case plan::Op::ShardQuantize:
    return shardOp(s, rank);
  case plan::Op::LrSchedule: {
    if (!s.shaped(1, 1, 0, {}, {0}))
      return std::nullopt;
    if (s.in(0).dtype != DType::I64)
      return s.fail("needs an i64 step");
    OpLaunchPlan p;
    p.launches.push_back(oneThread(
        "kiln_lr_schedule",
        {operand(0), result(0), integer(step.i64("warmup_steps")),
         integer(step.i64("total_steps")), real(step.f64("peak")),
         real(step.f64("min_lr")), integer(step.str("decay") != "constant")}));
    return p;
  }
  case plan::Op::DelayedAmax: {
    if (!s.shaped(1, 1, 2, {0}, {0}))
      return std::nullopt;
    if (step.operands.size() > 1 && s.in(1).dtype != DType::F32)
      return s.fail("needs an f32 current amax");
    OpLaunchPlan p;
    p.launches.push_back(oneThread(
        "kiln_delayed_amax",
        {operand(0), integer(s.in(0).numElements()),
         integer(step.str("algo") == "max"),
         step.operands.size() > 1 ? operand(1) : integer(0), result(0)}));
    return p;
  }
  case plan::Op::AmaxHistoryUpdate: {
    if (!s.shaped(2, 1, 0, {0, 1}, {0}))
      return std::nullopt;
    int64_t n = s.in(0).numElements();
    if (n < 1 || s.out(0).numElements() != n)
      return s.fail("needs a non-empty history and a result of its size");
    OpLaunchPlan p;
    p.launches.push_back(oneThread(
        "kiln_amax_history_update",
        {operand(0), operand(1), result(0), integer(n)}));
    return p;
  }
  default:
    break;
  }
  error = "the CUDA op kernels do not run '" + step.op + "'";
  return std::nullopt;
}

bool adamwJoins(const Plan &plan, const PlanStep &first,
                const PlanStep &next) {
  if (first.kind != plan::Op::AdamW || next.kind != plan::Op::AdamW ||
      first.operands.size() != 7 || next.operands.size() != 7 ||
      first.results.size() != 3 || next.results.size() != 3)
    return false;
  for (int i : {4, 5, 6})
    if (first.operands[i] != next.operands[i])
      return false;
  for (const char *name : kAdamWAttrs)
    if (!first.attrs.count(name) || !next.attrs.count(name) ||
        first.attrs.at(name) != next.attrs.at(name))
      return false;
  // In place: param, exp_avg and exp_avg_sq are their results' memory.
  auto inPlace = [&](const PlanStep &s) {
    for (auto [operand, result] : {std::pair{0, 0}, {2, 1}, {3, 2}})
      if (!sameStorage(plan.values[s.operands[operand]],
                       plan.values[s.results[result]]))
        return false;
    return true;
  };
  return inPlace(first) && inPlace(next);
}

std::optional<OpLaunchPlan>
adamwListLaunchPlan(const Plan &plan, const std::vector<const PlanStep *> &steps,
                    std::string &error, int perLaunch) {
  if (steps.empty() || perLaunch < 1 || perLaunch > kMaxAdamWListTensors) {
    error = "adamw: a list of no steps, or too many per launch";
    return std::nullopt;
  }
  OpLaunchPlan p;
  p.scratchBytes = 8 * 4; // the step's scalars
  for (const PlanStep *s : steps) {
    if (!adamwJoins(plan, *steps.front(), *s)) {
      error = "adamw: the steps cannot share one launch";
      return std::nullopt;
    }
    // The checks of the single-step launch (shapes, dtypes).
    if (!opLaunchPlan(plan, *s, error))
      return std::nullopt;
  }
  p.launches.push_back(adamwScalars(*steps.front()));
  for (size_t first = 0; first < steps.size(); first += perLaunch) {
    size_t last = std::min(steps.size(), first + perLaunch);
    OpKernelLaunch l{"kiln_adamw_list", 0, 256, 0,
                     {scratch(0), integer(static_cast<int64_t>(last - first))}};
    l.slots = kMaxOpKernelListArgs;
    for (size_t k = first; k < last; ++k) {
      const PlanStep &s = *steps[k];
      int64_t n = plan.values[s.operands[0]].numElements();
      for (Arg a : {operand(0), operand(1), code(plan.values[s.operands[1]].dtype),
                    operand(2), operand(3), integer(n)}) {
        a.step = static_cast<int32_t>(k);
        l.args.push_back(a);
      }
      l.grid += ceilDiv(n, kAdamWChunk);
    }
    if (l.grid > 0)
      p.launches.push_back(std::move(l));
  }
  return p;
}

} // namespace kiln::runtime::cuda
