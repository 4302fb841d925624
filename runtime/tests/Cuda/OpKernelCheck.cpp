//===- OpKernelCheck.cpp - The op kernels against the CPU backend ---------===//
//
//   kiln-op-kernel-check [--device host|gpu] [--stats] [--launches OP] PLAN...
//
// For every distinct library step of the plans that the CUDA backend runs
// with its op kernels (OpKernels.h; the op, its operands' and results'
// shapes and dtypes, its attributes, and for the shard ops each rank), runs
// the step's launches exactly as the executor does (the listed results and
// the scratch zeroed, each argument slot resolved, the launches in order)
// on random inputs, runs the CPU backend's op on the same inputs (widened
// to f32, results rounded to their dtypes), and compares. Exits 1 on the
// first difference beyond the op's tolerance (toleranceOf), naming the op,
// its location, the element and both values. Also checked: AdamW over each
// run of consecutive updates at once (adamwListLaunchPlan), a synthetic
// transpose step, meanDivideLaunch and the numerics check
// (nonFiniteCheckLaunch). Loss parallel's vocab_parallel_max, _stats and
// _stats_grad steps run at every tp position's vocab_start (tpPositions,
// OpKernelInputs.h), so a padded vocabulary's last slices are checked. --stats
// prints, per op, the largest difference seen in units in the last place of the
// result dtype. --launches OP prints how each distinct step of op OP is
// launched (its kernels, the results zeroed first, the scratch), so a test can
// show which path a plan takes.
//
// --device host: through the host shim (HostShim.h). --device gpu (builds
// with the CUDA backend): NVRTC compiles the library for GPU 0 and cudart
// launches it; with no usable GPU it prints why and exits 77. Both devices
// are in OpKernelDevices.cpp. On the GPU every attention and
// attention_grad step also runs through cuDNN's fused SDPA as the
// executor runs it (OpKernelCudnn.cpp), as do three synthetic bf16 shapes
// (head dims 64 and 128, sequences of 100, 128 and 200, GQA), each
// compared with the CPU backend within cudnnToleranceOf; a preset step
// cuDNN refuses is counted, a synthetic one fails the check.
//
//===----------------------------------------------------------------------===//

#include "../../lib/Cuda/SdpaConfig.h"
#include "HostShim.h"
#include "OpKernelDevices.h"
#include "OpKernelInputs.h"
#include "OpKernelTolerance.h"

#include "kiln/Runtime/Cpu/Bf16.h"
#include "kiln/Runtime/Cpu/Fp8.h"
#include "kiln/Runtime/Cpu/CpuOps.h"
#include "kiln/Runtime/Cuda/OpKernels.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <unistd.h>

using namespace kiln::runtime;
using hostshim::valueAt;
using namespace kiln::runtime::opcheck;
namespace plan = kiln::plan;

namespace {

#ifdef KILN_HAVE_CUDNN
constexpr bool kHaveCudnn = true;
#else
constexpr bool kHaveCudnn = false;
#endif

bool isFloat(DType t) { return t != DType::I32 && t != DType::I64; }

struct Stats {
  plan::Op op = plan::Op::Init; // whose tolerance applies
  bool cudnn = false;           // cudnnToleranceOf's
  int steps = 0;
  double maxUlps = 0, maxOfLargest = 0;
};

/// out and lse of attention_grad's operands: the CPU forward of its q, k,
/// v, rounded to their dtypes, so that the backward sees a real softmax.
std::string consistentAttention(const Plan &plan, const PlanStep &step,
                                std::vector<std::vector<uint8_t>> &in) {
  std::vector<std::vector<float>> wide(3);
  std::vector<View> operands;
  for (int k = 1; k <= 3; ++k) {
    const PlanValue &v = plan.values[step.operands[k]];
    for (int64_t i = 0; i < v.numElements(); ++i)
      wide[k - 1].push_back(valueAt(v.dtype, in[k], i));
    operands.push_back(View{wide[k - 1].data(), DType::F32, v.shape});
  }
  const PlanValue &out = plan.values[step.operands[4]],
                  &lse = plan.values[step.operands[5]];
  std::vector<float> o(out.numElements()), l(lse.numElements());
  std::vector<View> results = {View{o.data(), DType::F32, out.shape},
                               View{l.data(), DType::F32, lse.shape}};
  PlanStep forward = step;
  forward.op = "attention";
  forward.kind = plan::Op::Attention;
  if (Error failure =
          findCpuOp(plan::Op::Attention)(forward, operands, results))
    return failure.takeMessage();
  for (int64_t i = 0; i < out.numElements(); ++i)
    setValue(out.dtype, in[4], i, o[i]);
  for (int64_t i = 0; i < lse.numElements(); ++i)
    setValue(lse.dtype, in[5], i, l[i]);
  return "";
}

/// The CPU backend's results of the step on `in`, each in its dtype.
std::string cpuResults(const Plan &plan, const PlanStep &step, int rank,
                       std::vector<std::vector<uint8_t>> &in,
                       std::vector<std::vector<uint8_t>> &out) {
  std::vector<std::vector<float>> wide(step.operands.size()),
      res(step.results.size());
  std::vector<View> operands, results;
  for (size_t k = 0; k < step.operands.size(); ++k) {
    const PlanValue &v = plan.values[step.operands[k]];
    if (!isFloat(v.dtype)) {
      operands.push_back(View{in[k].data(), v.dtype, v.shape});
      continue;
    }
    for (int64_t i = 0; i < v.numElements(); ++i)
      wide[k].push_back(valueAt(v.dtype, in[k], i));
    operands.push_back(View{wide[k].data(), DType::F32, v.shape});
  }
  out.clear();
  // Token ids (a moved i32) go straight into their result, as bytes.
  std::vector<std::vector<uint8_t>> ids(step.results.size());
  for (size_t k = 0; k < step.results.size(); ++k) {
    const PlanValue &v = plan.values[step.results[k]];
    if (!isFloat(v.dtype)) {
      ids[k].assign(v.bytes(), 0);
      results.push_back(View{ids[k].data(), v.dtype, v.shape});
      continue;
    }
    res[k].assign(v.numElements(), 0.0f);
    results.push_back(View{res[k].data(), DType::F32, v.shape});
  }
  if (plan::category(step.kind) == plan::Category::ShardCast) {
    // As CpuExecutor::runShardOp: the rank's part of each weight.
    const auto &offsets = std::get<std::vector<int64_t>>(step.attrs.at("offsets"));
    const auto &sizes = std::get<std::vector<int64_t>>(step.attrs.at("sizes"));
    std::vector<cpu::FlatRange> weights;
    for (size_t i = 0; i < offsets.size(); ++i)
      weights.push_back({offsets[i], sizes[i]});
    int64_t n = operands[0].numElements();
    int64_t count = static_cast<int64_t>(weights.size());
    if (step.kind == plan::Op::ShardAmax) {
      cpu::shardAmax(operands[0].f32(), n, rank * n, weights.data(), count,
                     res[0].data());
    } else {
      out.emplace_back(n);
      cpu::shardQuantizeE4m3(operands[0].f32(), n, rank * n, weights.data(),
                             count, operands[1].f32(), out[0].data(),
                             res[1].data());
    }
  } else if (Error failure = findCpuOp(step.kind)(step, operands, results)) {
    return "the CPU backend fails: " + failure.message();
  }
  for (size_t k = out.size(); k < step.results.size(); ++k) {
    const PlanValue &v = plan.values[step.results[k]];
    if (!isFloat(v.dtype)) {
      out.push_back(std::move(ids[k]));
      continue;
    }
    out.emplace_back(v.bytes());
    for (int64_t i = 0; i < v.numElements(); ++i)
      setValue(v.dtype, out[k], i, res[k][i]);
  }
  return "";
}

/// Compares the results of step `at` of a launch plan (in `b`) with the
/// CPU backend's (`want`); empty when every result is within the op's
/// tolerance (cuDNN's SDPA: cudnnToleranceOf), else the first difference.
std::string compareResults(const Plan &plan, const PlanStep &step,
                           const std::vector<std::vector<uint8_t>> &want,
                           const Buffers &b, size_t at, bool gpu, Stats &stats,
                           bool cudnn = false) {
  ++stats.steps;
  std::string first; // the first difference past the tolerance
  for (size_t k = 0; k < step.results.size(); ++k) {
    Tolerance tol =
        cudnn ? cudnnToleranceOf(step.kind, k) : toleranceOf(step.kind, gpu);
    const PlanValue &v = plan.values[step.results[k]];
    const std::vector<uint8_t> &got = b.storage[b.results[at][k]];
    if (!isFloat(v.dtype)) {
      // Token ids: every byte.
      if (got.size() < want[k].size() ||
          std::memcmp(got.data(), want[k].data(), want[k].size()) != 0)
        return step.op + " result " + std::to_string(k) +
               ": the ids differ from the CPU backend's";
      continue;
    }
    double largest = 0;
    for (int64_t i = 0; i < v.numElements(); ++i)
      largest = std::max(largest, std::fabs(double(valueAt(v.dtype, want[k], i))));
    // Every element is compared, past the first difference too, so that
    // the statistics are the result's largest difference.
    for (int64_t i = 0; i < v.numElements(); ++i) {
      float w = valueAt(v.dtype, want[k], i), g = valueAt(v.dtype, got, i);
      if ((std::isnan(w) && std::isnan(g)) || std::memcmp(&w, &g, 4) == 0)
        continue;
      // Bit for bit means the zero's sign too.
      bool exact = tol.ulps == 0 && tol.ofMax == 0;
      double diff = std::fabs(double(g) - double(w)) +
                    (exact && std::signbit(g) != std::signbit(w) ? 1 : 0);
      // A zero's ulp is the smallest subnormal, which would make any
      // difference there read as 1e30 ulp (cuDNN's attention_grad on the
      // first GPU run): zeros count in the share of the largest only.
      if (w != 0)
        stats.maxUlps = std::max(stats.maxUlps, diff / ulpOf(v.dtype, w));
      stats.maxOfLargest = std::max(stats.maxOfLargest, diff / largest);
      if (!first.empty() ||
          diff <= tol.ulps * ulpOf(v.dtype, w) + tol.ofMax * largest)
        continue;
      char text[200];
      std::snprintf(text, sizeof text,
                    "result %zu element %lld: %s %.9g, CPU backend %.9g "
                    "(%s)",
                    k, static_cast<long long>(i), cudnn ? "cuDNN" : "kernel", g,
                    w, toleranceText(tol).c_str());
      first = step.op + " " + text;
    }
  }
  return first;
}

/// Random operands of `step` into `in`; for attention_grad, its forward
/// operands made consistent (the CPU forward's out and lse). Empty, or why
/// not.
std::string randomInputs(const Plan &plan, const PlanStep &step,
                         std::mt19937 &rng,
                         std::vector<std::vector<uint8_t>> &in) {
  for (size_t k = 0; k < step.operands.size(); ++k)
    in.push_back(randomOperand(plan, step, k, rng));
  if (step.kind == plan::Op::AttentionGrad)
    if (std::string failure = consistentAttention(plan, step, in);
        !failure.empty())
      return "the CPU forward fails: " + failure;
  return "";
}

/// Checks one step's launches against the CPU backend; empty when every
/// result is within the op's tolerance, else the first difference.
std::string checkStep(const Plan &plan, const PlanStep &step, int rank,
                      Device &device, std::mt19937 &rng, Stats &stats) {
  Expected<cuda::OpLaunchPlan> p = cuda::opLaunchPlan(plan, step, rank);
  if (!p)
    return "no launches: " + p.error().message();
  for (const cuda::OpKernelLaunch &l : p->launches)
    if (l.args.size() > static_cast<size_t>(l.slots) || l.grid < 1 ||
        l.block < 1 || l.block > 1024 || l.sharedBytes > 48 * 1024)
      return "launch of " + l.kernel + " exceeds what a launch takes";
  std::vector<std::vector<uint8_t>> in;
  if (std::string failure = randomInputs(plan, step, rng, in); !failure.empty())
    return failure;

  Buffers b;
  b.storage = in; // the kernels may write operands in place
  b.operands.emplace_back();
  b.results.emplace_back();
  for (size_t k = 0; k < in.size(); ++k)
    b.operands[0].push_back(static_cast<int>(k));
  for (int64_t id : step.results) {
    const PlanValue &v = plan.values[id];
    int shared = -1;
    for (size_t k = 0; k < step.operands.size(); ++k)
      if (sameStorage(v, plan.values[step.operands[k]]))
        shared = static_cast<int>(k);
    if (shared < 0) {
      // Garbage, so that a result the launches do not write shows up.
      b.storage.emplace_back(v.bytes(), 0xa5);
      shared = static_cast<int>(b.storage.size() - 1);
    }
    b.results[0].push_back(shared);
  }
  if (Error failure = device.run(*p, b))
    return failure.takeMessage();

  std::vector<std::vector<uint8_t>> want;
  if (std::string failure = cpuResults(plan, step, rank, in, want);
      !failure.empty())
    return failure;
  return compareResults(plan, step, want, b, 0, device.onGpu(), stats);
}

/// Runs attention step `step` through cuDNN's fused SDPA on GPU 0 on
/// random inputs and compares it with the CPU backend; empty when within
/// cudnnToleranceOf, or when cuDNN refuses the step (`refusal` says why).
std::string checkCudnnStep(const Plan &plan, const PlanStep &step,
                           std::mt19937 &rng, Stats &stats,
                           std::string &refusal) {
  std::vector<std::vector<uint8_t>> in, got, want;
  if (std::string failure = randomInputs(plan, step, rng, in); !failure.empty())
    return failure;
  bool refused = false;
  std::string failure = runCudnnAttention(plan, step, in, got, refused);
  if (refused) {
    refusal = failure;
    return "";
  }
  if (!failure.empty())
    return "cuDNN: " + failure;
  if (std::string failure = cpuResults(plan, step, 0, in, want);
      !failure.empty())
    return failure;
  Buffers b;
  b.storage = got;
  b.results = {{}};
  for (size_t k = 0; k < got.size(); ++k)
    b.results[0].push_back(static_cast<int>(k));
  return compareResults(plan, step, want, b, 0, true, stats, true);
}

/// Runs AdamW over `steps` at once (adamwListLaunchPlan, `perLaunch`
/// parameters per kiln_adamw_list launch) on random inputs, the steps'
/// shared operands (grad norm, lr, step) one buffer as on the device, and
/// compares each step's results with the CPU backend's adamw of that step.
std::string checkAdamWList(const Plan &plan,
                           const std::vector<const PlanStep *> &steps,
                           int perLaunch, Device &device, std::mt19937 &rng,
                           Stats &stats) {
  Expected<cuda::OpLaunchPlan> p =
      cuda::adamwListLaunchPlan(plan, steps, perLaunch);
  if (!p)
    return "no launches: " + p.error().message();
  Buffers b;
  std::map<int64_t, int> byValue;
  for (const PlanStep *s : steps) {
    b.operands.emplace_back();
    b.results.emplace_back();
    for (size_t k = 0; k < s->operands.size(); ++k) {
      auto [it, fresh] = byValue.try_emplace(s->operands[k],
                                             static_cast<int>(b.storage.size()));
      if (fresh)
        b.storage.push_back(randomOperand(plan, *s, k, rng));
      b.operands.back().push_back(it->second);
    }
    for (int64_t id : s->results) {
      int shared = -1;
      for (size_t k = 0; k < s->operands.size(); ++k)
        if (sameStorage(plan.values[id], plan.values[s->operands[k]]))
          shared = b.operands.back()[k];
      if (shared < 0)
        return "adamw: a result that is not in place";
      b.results.back().push_back(shared);
    }
  }
  std::vector<std::vector<std::vector<uint8_t>>> in(steps.size());
  for (size_t k = 0; k < steps.size(); ++k)
    for (int i : b.operands[k])
      in[k].push_back(b.storage[i]);
  if (Error failure = device.run(*p, b))
    return failure.takeMessage();
  for (size_t k = 0; k < steps.size(); ++k) {
    std::vector<std::vector<uint8_t>> want;
    if (std::string failure = cpuResults(plan, *steps[k], 0, in[k], want);
        !failure.empty())
      return failure;
    if (std::string failure = compareResults(plan, *steps[k], want, b, k,
                                             device.onGpu(), stats);
        !failure.empty())
      return steps[k]->loc + ": " + failure;
  }
  return "";
}

/// A plan of one transpose step (no preset's plan has one outside a fused
/// group): x [3, 5, 7] of `t` permuted by [2, 0, 1].
Plan transposePlan(DType t) {
  Plan plan;
  PlanValue x, y;
  x.id = 0;
  x.shape = {3, 5, 7};
  x.dtype = t;
  y.id = 1;
  y.shape = {7, 3, 5};
  y.dtype = t;
  y.offset = 4096;
  plan.values = {x, y};
  PlanStep step;
  step.op = "transpose";
  step.kind = plan::Op::Transpose;
  step.operands = {0};
  step.results = {1};
  step.attrs["permutation"] = std::vector<int64_t>{2, 0, 1};
  step.loc = "a synthetic plan";
  plan.entries["transpose"].steps.push_back(step);
  return plan;
}

/// meanDivideLaunch against the CPU executor's division of a mean.
std::string checkMeanDivide(DType t, Device &device, std::mt19937 &rng) {
  const int64_t n = 3000, divisor = 3;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Buffers b;
  b.storage.emplace_back(n * dtypeBytes(t));
  for (int64_t i = 0; i < n; ++i)
    setValue(t, b.storage[0], i, normal(rng));
  std::vector<uint8_t> before = b.storage[0];
  b.operands = {{}};
  b.results = {{0}};
  if (Error failure = device.run(cuda::meanDivideLaunch(t, n, divisor), b))
    return failure.takeMessage();
  for (int64_t i = 0; i < n; ++i) {
    std::vector<uint8_t> want(dtypeBytes(t));
    setValue(t, want, 0, valueAt(t, before, i) / static_cast<float>(divisor));
    if (std::memcmp(want.data(), b.storage[0].data() + i * dtypeBytes(t),
                    dtypeBytes(t)) != 0)
      return std::string(dtypeName(t)) + " element " + std::to_string(i) +
             ": kernel " + std::to_string(valueAt(t, b.storage[0], i)) +
             ", CPU backend " + std::to_string(valueAt(t, want, 0));
  }
  return "";
}

/// The per-op numerics check (nonFiniteCheckLaunch) on `t` tensors: a
/// clean tensor leaves the flag zero; a tensor with a NaN and an earlier
/// infinity gives the infinity's element; a later step's NaN does not
/// replace an earlier step's value in the same flag; the step and result
/// come back as given.
std::string checkNonFinite(DType t, Device &device, std::mt19937 &rng) {
  const int64_t n = 5000;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto run = [&](std::vector<uint8_t> &flag, int64_t step, int result,
                 int64_t nanAt, int64_t infAt) -> std::string {
    Buffers b;
    b.storage.emplace_back(n * dtypeBytes(t));
    for (int64_t i = 0; i < n; ++i)
      setValue(t, b.storage[0], i, normal(rng));
    if (nanAt >= 0) {
      if (isFp8(t))
        b.storage[0][nanAt] = 0x7f; // e4m3's and e5m2's NaN
      else
        setValue(t, b.storage[0], nanAt, std::nanf(""));
    }
    if (infAt >= 0) {
      if (t == DType::F8E5M2)
        b.storage[0][infAt] = 0x7c; // the saturating cast would not give it
      else
        setValue(t, b.storage[0], infAt, INFINITY);
    }
    b.storage.push_back(flag);
    b.operands = {{0, 1}};
    b.results = {{}};
    cuda::OpLaunchPlan p;
    p.launches.push_back(*cuda::nonFiniteCheckLaunch(t, n, step, result));
    Error failure = device.run(p, b);
    flag = b.storage[1];
    return failure.takeMessage();
  };
  auto flagOf = [](const std::vector<uint8_t> &flag) {
    uint64_t f;
    std::memcpy(&f, flag.data(), 8);
    return f;
  };
  std::vector<uint8_t> flag(8, 0);
  if (std::string failure = run(flag, 3, 0, -1, -1); !failure.empty())
    return failure;
  if (flagOf(flag) != 0)
    return "a finite tensor sets the flag";
  bool hasInf = t == DType::F32 || t == DType::BF16 || t == DType::F8E5M2;
  if (std::string failure = run(flag, 7, 2, 3001, hasInf ? 1200 : -1);
      !failure.empty())
    return failure;
  if (std::string failure = run(flag, 9, 0, 10, -1); !failure.empty())
    return failure;
  std::optional<cuda::NonFinite> bad = cuda::decodeNonFinite(flagOf(flag));
  std::string want = std::string("op 7 result 2: ") +
                     (hasInf ? "infinity" : "NaN") + " in its result 2 at element " +
                     (hasInf ? "1200" : "3001");
  std::string got = bad ? "op " + std::to_string(bad->step) + " result " +
                              std::to_string(bad->result) + ": " +
                              bad->describe()
                        : "nothing";
  if (got != want)
    return std::string(dtypeName(t)) + ": the flag says '" + got +
           "', not '" + want + "'";
  return "";
}

/// "op [shapes and dtypes] {attrs} rank r": what makes two steps the same
/// check.
std::string signature(const Plan &plan, const PlanStep &step, int rank) {
  std::string s = step.op;
  for (const auto *ids : {&step.operands, &step.results}) {
    s += " |";
    for (int64_t id : *ids) {
      const PlanValue &v = plan.values[id];
      s += std::string(" ") + dtypeName(v.dtype) + "[";
      for (int64_t d : v.shape)
        s += std::to_string(d) + ",";
      s += "]";
    }
  }
  for (const auto &[name, value] : step.attrs) {
    if (name == "param")
      continue;
    s += " " + name + "=";
    if (const auto *list = std::get_if<std::vector<int64_t>>(&value))
      for (int64_t x : *list)
        s += std::to_string(x) + ",";
    else if (const auto *text = std::get_if<std::string>(&value))
      s += *text;
    else if (const auto *d = std::get_if<double>(&value))
      s += std::to_string(*d);
    else if (const auto *i = std::get_if<int64_t>(&value))
      s += std::to_string(*i);
    else
      s += std::get<bool>(value) ? "true" : "false";
  }
  return s + " rank " + std::to_string(rank);
}

/// "PLAN: op dtype[shape]... -> dtype[shape]...: zeroes results 0, scratch
/// N bytes, launches kernel, ..." for --launches.
std::string launchesLine(const std::string &path, const Plan &plan,
                         const PlanStep &step, const cuda::OpLaunchPlan &p) {
  auto values = [&](const std::vector<int64_t> &ids) {
    std::string s;
    for (int64_t id : ids) {
      const PlanValue &v = plan.values[id];
      s += std::string(" ") + dtypeName(v.dtype) + "[";
      for (size_t d = 0; d < v.shape.size(); ++d)
        s += (d ? "," : "") + std::to_string(v.shape[d]);
      s += "]";
    }
    return s;
  };
  std::string s = path + ": " + step.op + values(step.operands) + " ->" +
                  values(step.results) + ": zeroes results";
  for (int k : p.zeroResults)
    s += " " + std::to_string(k);
  if (p.zeroResults.empty())
    s += " none";
  s += ", scratch " + std::to_string(p.scratchBytes) + " bytes, launches";
  for (size_t i = 0; i < p.launches.size(); ++i)
    s += (i ? ", " : " ") + p.launches[i].kernel;
  return s;
}

} // namespace

int main(int argc, char **argv) {
  std::string deviceName = "host";
  bool stats = false;
  std::string launchesOf; // --launches
  std::vector<std::string> plans;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc)
      deviceName = argv[++i];
    else if (std::strcmp(argv[i], "--stats") == 0)
      stats = true;
    else if (std::strcmp(argv[i], "--launches") == 0 && i + 1 < argc)
      launchesOf = argv[++i];
    else
      plans.push_back(argv[i]);
  }
  if (plans.empty() || (deviceName != "host" && deviceName != "gpu")) {
    std::fprintf(stderr, "usage: kiln-op-kernel-check [--device host|gpu] "
                         "[--stats] [--launches OP] PLAN...\n");
    return 1;
  }
  char dirTemplate[] = "/tmp/kiln-op-kernels-XXXXXX";
  const char *dir = mkdtemp(dirTemplate);
  if (!dir) {
    std::fprintf(stderr, "cannot make a temporary folder\n");
    return 1;
  }
  bool skip = false;
  Expected<std::unique_ptr<Device>> opened =
      deviceName == "host" ? openHostDevice(dir) : openGpuDevice(skip);
  if (!opened) {
    const std::string &why = opened.error().message();
    if (skip) {
      std::printf("skipped: %s\n", why.c_str());
      return 77;
    }
    std::fprintf(stderr, "%s\n", why.c_str());
    return 1;
  }
  std::unique_ptr<Device> device = std::move(*opened);

  std::set<std::string> checked;
  std::map<std::string, Stats> perOp;
  auto statsOf = [&](const std::string &label, plan::Op op) -> Stats & {
    Stats &s = perOp[label];
    s.op = op;
    return s;
  };
  std::mt19937 rng(11);
  int count = 0, failures = 0; // every check runs, past a failure too
  // Attention through cuDNN (GPU only): steps compared, refused, the first
  // refusal. `mustRun`: a refusal fails the check (with cuDNN built in).
  int cudnnChecked = 0, cudnnRefused = 0;
  std::string firstRefusal;
  auto cudnnCheck = [&](const Plan &p, const PlanStep &step, bool mustRun) {
    if (!device->onGpu() || !cuda::isAttention(step.kind))
      return std::string();
    Stats &s = statsOf(step.op + " (cuDNN)", step.kind);
    s.cudnn = true;
    std::string refusal, failure = checkCudnnStep(p, step, rng, s, refusal);
    if (!failure.empty() || refusal.empty()) {
      cudnnChecked += failure.empty() ? 1 : 0;
      return failure;
    }
    ++cudnnRefused;
    firstRefusal = firstRefusal.empty() ? refusal : firstRefusal;
    return mustRun && kHaveCudnn ? "cuDNN refuses it: " + refusal : "";
  };
  for (const std::string &path : plans) {
    std::string error;
    Expected<Plan> plan = loadPlan(path);
    if (!plan) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(),
                   plan.error().message().c_str());
      return 1;
    }
    for (const auto &[name, entry] : plan->entries)
      for (const PlanStep &planStep : entry.steps) {
        if (planStep.group || !cuda::isKernelOp(planStep.kind))
          continue;
        Expected<std::vector<PlanStep>> positions =
            tpPositions(*plan, planStep);
        if (!positions) {
          std::fprintf(stderr, "%s: %s, %s: %s\n", path.c_str(), name.c_str(),
                       planStep.loc.c_str(),
                       positions.error().message().c_str());
          return 1;
        }
        bool shard = plan::category(planStep.kind) == plan::Category::ShardCast;
        for (const PlanStep &step : *positions)
          for (int rank = 0; rank < (shard ? plan->ranks : 1); ++rank) {
            if (!checked.insert(signature(*plan, step, rank)).second)
              continue;
            ++count;
            std::string failure = checkStep(*plan, step, rank, *device, rng,
                                            statsOf(step.op, step.kind));
            if (failure.empty())
              failure = cudnnCheck(*plan, step, false);
            if (!failure.empty()) {
              std::fprintf(stderr, "%s: %s, %s (rank %d): %s\n", path.c_str(),
                           name.c_str(), step.loc.c_str(), rank,
                           failure.c_str());
              ++failures;
              continue;
            }
            if (step.op == launchesOf)
              if (Expected<cuda::OpLaunchPlan> p =
                      cuda::opLaunchPlan(*plan, step, rank))
                std::printf("%s\n",
                            launchesLine(path, *plan, step, *p).c_str());
          }
      }
    // AdamW over consecutive updates at once, as the executor runs them
    // (CudaActions.cpp): all parameters per launch, and 3 per launch so
    // that a list spans several launches.
    for (const auto &[name, entry] : plan->entries)
      for (size_t i = 0; i < entry.steps.size(); ++i) {
        std::vector<const PlanStep *> run = {&entry.steps[i]};
        while (i + run.size() < entry.steps.size() &&
               cuda::adamwJoins(*plan, entry.steps[i], entry.steps[i + run.size()]))
          run.push_back(&entry.steps[i + run.size()]);
        if (run.size() < 2)
          continue;
        for (int perLaunch : {cuda::kMaxAdamWListTensors, 3}) {
          ++count;
          std::string failure = checkAdamWList(*plan, run, perLaunch, *device,
                                               rng,
                                               statsOf("adamw_list",
                                                       plan::Op::AdamW));
          if (!failure.empty()) {
            std::fprintf(stderr, "%s: %s, AdamW over %zu parameters: %s\n",
                         path.c_str(), name.c_str(), run.size(),
                         failure.c_str());
            ++failures;
          }
        }
        i += run.size() - 1;
      }
  }
  // Shapes beyond the presets' for cuDNN: head dims 64 and 128, GQA,
  // sequences that are not multiples of 64 or 128.
  if (device->onGpu())
    for (const Plan &p : {cudnnAttentionPlan(2, 128, 8, 2, 64, true),
                          cudnnAttentionPlan(2, 100, 4, 1, 64, true),
                          cudnnAttentionPlan(1, 200, 4, 4, 128, false)})
      for (const PlanStep &step : p.entries.at("attention").steps)
        if (std::string failure = cudnnCheck(p, step, true); !failure.empty()) {
          std::fprintf(stderr, "%s, %s: %s\n", step.op.c_str(),
                       cuda::sdpaConfig(p, step)->describe().c_str(),
                       failure.c_str());
          ++failures;
        }
  for (DType t : {DType::F32, DType::BF16}) {
    Plan plan = transposePlan(t);
    ++count;
    if (std::string failure =
            checkStep(plan, plan.entries["transpose"].steps[0], 0, *device,
                      rng, statsOf("transpose", plan::Op::Transpose));
        !failure.empty()) {
      std::fprintf(stderr, "transpose: %s\n", failure.c_str());
      ++failures;
    }
  }
  for (DType t : {DType::F32, DType::BF16, DType::F8E4M3, DType::F8E5M2}) {
    ++count;
    if (std::string failure = checkNonFinite(t, *device, rng);
        !failure.empty()) {
      std::fprintf(stderr, "numerics check: %s\n", failure.c_str());
      ++failures;
    }
  }
  for (DType t : {DType::F32, DType::BF16}) {
    ++count;
    if (std::string failure = checkMeanDivide(t, *device, rng);
        !failure.empty()) {
      std::fprintf(stderr, "mean divide: %s\n", failure.c_str());
      ++failures;
    }
  }
  // The largest differences are printed on request, and whenever a check
  // failed: the numbers a tolerance is then stated from.
  if (stats || failures)
    for (const auto &[op, s] : perOp)
      std::printf("%-20s %3d steps, largest difference %.3g ulp, %.3g of the "
                  "largest magnitude (%s)\n",
                  op.c_str(), s.steps, s.maxUlps, s.maxOfLargest,
                  s.cudnn ? "tolerance per result, cudnnToleranceOf"
                          : toleranceText(s.op, device->onGpu()).c_str());
  if (device->onGpu())
    std::printf("attention through cuDNN's fused SDPA: %d steps match the CPU "
                "backend, %d refused%s%s\n",
                cudnnChecked, cudnnRefused,
                firstRefusal.empty() ? "" : "; first: ", firstRefusal.c_str());
  std::system((std::string("rm -rf ") + dir).c_str());
  if (failures) {
    std::printf("%d of %d op kernel checks on the %s differ from the CPU "
                "backend\n",
                failures, count, deviceName.c_str());
    return 1;
  }
  std::printf("%d op kernels on the %s match the CPU backend\n", count,
              deviceName.c_str());
  return 0;
}
