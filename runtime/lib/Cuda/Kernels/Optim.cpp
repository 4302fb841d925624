//===- Optim.cpp - The optimizer kernels: CUDA C++ and launches -----------===//
//
// The gradient norm (sums of squares in double over chunks, then one
// block adds the partials in a fixed order), the learning-rate schedule
// and AdamW, one launch per parameter or one per list of parameters.
// Scalars that every element needs (AdamW's coefficients) are computed
// once by a one-thread kernel into scratch, in the CPU backend's order of
// double and float operations, so the elementwise kernel is the CPU's loop.
// Ops whose operands are lists (grad_norm) run as several launches, since
// a launch has 16 argument slots.
//
//===----------------------------------------------------------------------===//

#include "Families.h"
#include "Launch.h"

#include <algorithm>

namespace kiln::runtime::cuda::kernels {

namespace {

const char *kSource = R"(
// Sum of squares, in double, of the chunks of up to 6 f32 tensors: block
// b takes chunk b of the concatenated chunk list (KILN_SUMSQ_CHUNK elements
// each; the grid is their count) and writes its sum to partials[first + b]. 0 partials (double),
// 1 first, 2 count, then (pointer, n) per tensor. Blocks of 256.
#define KILN_SUMSQ_CHUNK 16384
extern "C" __global__ void kiln_sum_squares(KilnOpArgs a) {
  __shared__ double ds[256];
  kiln_i64 b = blockIdx.x;
  int count = (int)a.s[2].i, k = 0;
  kiln_i64 chunks = 0;
  for (; k < count; ++k) {
    chunks = (a.s[4 + 2 * k].i + KILN_SUMSQ_CHUNK - 1) / KILN_SUMSQ_CHUNK;
    if (b < chunks)
      break;
    b -= chunks;
  }
  if (k == count) // past the chunks (not launched so): nothing to add
    return;
  const float *x = (const float *)a.s[3 + 2 * k].p;
  kiln_i64 n = a.s[4 + 2 * k].i, lo = b * KILN_SUMSQ_CHUNK;
  kiln_i64 hi = lo + KILN_SUMSQ_CHUNK < n ? lo + KILN_SUMSQ_CHUNK : n;
  double sum = 0;
  for (kiln_i64 i = lo + threadIdx.x; i < hi; i += blockDim.x)
    sum += (double)x[i] * (double)x[i];
  ds[threadIdx.x] = sum;
  double total = kiln_block_sum(ds);
  if (threadIdx.x == 0)
    ((double *)a.s[0].p)[a.s[1].i + blockIdx.x] = total;
}

// The norm (or, `squared`, its square) of the partials' sum. One block of
// 256. 0 partials, 1 count, 2 out (f32), 3 squared.
extern "C" __global__ void kiln_grad_norm(KilnOpArgs a) {
  __shared__ double ds[256];
  const double *part = (const double *)a.s[0].p;
  kiln_i64 count = a.s[1].i;
  double sum = 0;
  for (kiln_i64 i = threadIdx.x; i < count; i += blockDim.x)
    sum += part[i];
  ds[threadIdx.x] = sum;
  double total = kiln_block_sum(ds);
  if (threadIdx.x == 0) {
    double norm = sqrt(total);
    ((float *)a.s[2].p)[0] = (float)(a.s[3].i ? norm * norm : norm);
  }
}

// Linear warmup, then cosine decay (or constant), in double. One thread.
// 0 step (i64), 1 out (f32), 2 warmup, 3 total, 4 peak, 5 min, 6 cosine.
extern "C" __global__ void kiln_lr_schedule(KilnOpArgs a) {
  kiln_i64 step = *(const kiln_i64 *)a.s[0].p, warmupSteps = a.s[2].i;
  double peak = a.s[4].f, minLr = a.s[5].f, lr = peak;
  if (warmupSteps > 0 && step <= warmupSteps) {
    lr = peak * (double)step / (double)warmupSteps;
  } else if (a.s[6].i) {
    kiln_i64 warmup = warmupSteps > 0 ? warmupSteps : 0;
    kiln_i64 span = a.s[3].i - warmup > 1 ? a.s[3].i - warmup : 1;
    double p = (double)(step - warmup) / (double)span;
    p = p < 0.0 ? 0.0 : p > 1.0 ? 1.0 : p;
    lr = minLr + (peak - minLr) * (1.0 + cos(3.14159265358979323846 * p)) / 2.0;
  }
  *(float *)a.s[1].p = (float)lr;
}

// AdamW's per-step scalars, as runtime/lib/Cpu/Optim.cpp computes them:
// c[0] the clip coefficient, then decay, 1 - beta1, beta2, 1 - beta2,
// -step size, sqrt(bias correction 2), eps. One thread. 0 grad norm (f32),
// 1 lr (f32), 2 step (i64), 3 c (f32[8]), 4 beta1, 5 beta2, 6 eps,
// 7 weight decay, 8 max norm.
extern "C" __global__ void kiln_adamw_scalars(KilnOpArgs a) {
  float *c = (float *)a.s[3].p;
  double lr = (double)*(const float *)a.s[1].p;
  double t = (double)*(const kiln_i64 *)a.s[2].p;
  double beta1 = a.s[4].f, beta2 = a.s[5].f, maxNorm = a.s[8].f;
  double bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
  float clip = 1.0f;
  if (maxNorm > 0) {
    float reciprocal = 1.0f / (*(const float *)a.s[0].p + 1e-6f);
    clip = reciprocal * (float)maxNorm;
    clip = clip != clip ? clip : (1.0f < clip ? 1.0f : clip);
  }
  c[0] = clip;
  c[1] = (float)(1.0 - lr * a.s[7].f);
  c[2] = (float)(1.0 - beta1);
  c[3] = (float)beta2;
  c[4] = (float)(1.0 - beta2);
  c[5] = (float)(-(lr / bc1));
  c[6] = (float)sqrt(bc2);
  c[7] = (float)a.s[6].f;
}

// One AdamW step of element i (the CPU's loop body); the results may be
// the operands' buffers. c: the step's scalars (kiln_adamw_scalars).
__device__ __forceinline__ void kiln_adamw_element(
    const float *c, const float *param, const void *grad, int gradType,
    const float *expAvg, const float *expAvgSq, float *paramOut,
    float *expAvgOut, float *expAvgSqOut, kiln_i64 i) {
  const float clip = c[0], decay = c[1], w = c[2], beta2 = c[3],
              oneMinusBeta2 = c[4], negStepSize = c[5], bc2Sqrt = c[6],
              eps = c[7];
  float g = kiln_load(grad, gradType, i) * clip;
  float p = param[i] * decay;
  float mi = expAvg[i];
  mi = fabsf(w) < 0.5f ? mi + w * (g - mi) : g - (g - mi) * (1.0f - w);
  float vi = expAvgSq[i] * beta2;
  vi = vi + oneMinusBeta2 * g * g;
  float denom = sqrtf(vi) / bc2Sqrt + eps;
  p = p + negStepSize * mi / denom;
  expAvgOut[i] = mi;
  expAvgSqOut[i] = vi;
  paramOut[i] = p;
}

// One AdamW step per element; the results may be the operands' buffers.
// 0 param, 1 grad, 2 grad dtype, 3 exp_avg, 4 exp_avg_sq, 5 param out,
// 6 exp_avg out, 7 exp_avg_sq out, 8 scalars, 9 n.
extern "C" __global__ void kiln_adamw(KilnOpArgs a) {
  kiln_i64 n = a.s[9].i;
  for (kiln_i64 i = kiln_thread(); i < n; i += kiln_threads())
    kiln_adamw_element((const float *)a.s[8].p, (const float *)a.s[0].p,
                       a.s[1].p, (int)a.s[2].i, (const float *)a.s[3].p,
                       (const float *)a.s[4].p, (float *)a.s[5].p,
                       (float *)a.s[6].p, (float *)a.s[7].p, i);
}

// AdamW over many parameters in one launch, each updated in place: block b
// takes chunk b of the concatenated chunk list (KILN_ADAMW_CHUNK elements
// each; the grid is their count). 0 scalars, 1 count, then per parameter
// (param, grad, grad dtype, exp_avg, exp_avg_sq, n). Blocks of 256.
#define KILN_ADAMW_CHUNK 4096
extern "C" __global__ void kiln_adamw_list(KilnOpListArgs a) {
  kiln_i64 b = blockIdx.x;
  int count = (int)a.s[1].i, k = 0;
  for (; k < count; ++k) {
    kiln_i64 chunks = (a.s[7 + 6 * k].i + KILN_ADAMW_CHUNK - 1) / KILN_ADAMW_CHUNK;
    if (b < chunks)
      break;
    b -= chunks;
  }
  if (k == count) // past the chunks (not launched so): nothing to do
    return;
  const KilnSlot *t = a.s + 2 + 6 * k;
  kiln_i64 n = t[5].i, lo = b * KILN_ADAMW_CHUNK;
  kiln_i64 hi = lo + KILN_ADAMW_CHUNK < n ? lo + KILN_ADAMW_CHUNK : n;
  for (kiln_i64 i = lo + threadIdx.x; i < hi; i += blockDim.x)
    kiln_adamw_element((const float *)a.s[0].p, (const float *)t[0].p, t[1].p,
                       (int)t[2].i, (const float *)t[3].p,
                       (const float *)t[4].p, (float *)t[0].p, (float *)t[3].p,
                       (float *)t[4].p, i);
}
)";

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

constexpr int64_t kSumSquaresChunk = 16384; // KILN_SUMSQ_CHUNK
constexpr size_t kSumSquaresTensors = 6;     // (pointer, n) pairs per launch
constexpr int64_t kAdamWChunk = 4096;        // KILN_ADAMW_CHUNK

} // namespace

const char *optimSource() { return kSource; }

Result gradNorm(const Step &s) {
  size_t count = s.step.operands.size();
  if (Error e = s.shaped(1, 1, 1 << 20, {}, {0}))
    return e;
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

Result adamw(const Step &s) {
  // Operands: param, grad, exp_avg, exp_avg_sq, grad_norm, lr, step;
  // results: param, exp_avg, exp_avg_sq (maybe the operands' buffers).
  if (Error e = s.shaped(7, 3, 0, {0, 2, 3, 4, 5}, {0, 1, 2}))
    return e;
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

Result lrSchedule(const Step &s) {
  if (Error e = s.shaped(1, 1, 0, {}, {0}))
    return e;
  if (s.in(0).dtype != DType::I64)
    return s.fail("needs an i64 step");
  OpLaunchPlan p;
  p.launches.push_back(oneThread(
      "kiln_lr_schedule",
      {operand(0), result(0), integer(s.step.i64("warmup_steps")),
       integer(s.step.i64("total_steps")), real(s.step.f64("peak")),
       real(s.step.f64("min_lr")), integer(s.step.str("decay") != "constant")}));
  return p;
}

} // namespace kiln::runtime::cuda::kernels

namespace kiln::runtime::cuda {

using namespace kernels;

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

Expected<OpLaunchPlan>
adamwListLaunchPlan(const Plan &plan,
                    const std::vector<const PlanStep *> &steps, int perLaunch) {
  if (steps.empty() || perLaunch < 1 || perLaunch > kMaxAdamWListTensors)
    return Error("adamw: a list of no steps, or too many per launch");
  OpLaunchPlan p;
  p.scratchBytes = 8 * 4; // the step's scalars
  for (const PlanStep *s : steps) {
    if (!adamwJoins(plan, *steps.front(), *s))
      return Error("adamw: the steps cannot share one launch");
    // The checks of the single-step launch (shapes, dtypes).
    if (Expected<OpLaunchPlan> one = opLaunchPlan(plan, *s); !one)
      return one.takeError();
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
