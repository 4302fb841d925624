//===- Fp8.cpp - The FP8 bookkeeping kernels: CUDA C++ and launches -------===//
//
// The delayed recipe's amax history (its maximum, its update) and the FP8
// all-gather's casts on a rank's shard of a flat buffer: per weight, the
// amax of its elements in the shard, its scale, and its e4m3 codes.
//
//===----------------------------------------------------------------------===//

#include "Families.h"
#include "Launch.h"

#include <algorithm>

namespace kiln::runtime::cuda::kernels {

namespace {

const char *kSource = R"(
// The history's maximum (or its newest entry); with a current amax, that
// stands in for an empty (non-positive) history. One thread.
// 0 history, 1 n, 2 max, 3 current or null, 4 out.
extern "C" __global__ void kiln_delayed_amax(KilnOpArgs a) {
  const float *history = (const float *)a.s[0].p;
  float h = history[0];
  if (a.s[2].i)
    for (kiln_i64 i = 1; i < a.s[1].i; ++i)
      h = h < history[i] ? history[i] : h;
  const float *current = (const float *)a.s[3].p;
  *(float *)a.s[4].p = current && !(h > 0.0f) ? *current : h;
}

// out = [amax, history[0], ..., history[n - 2]]; out may be history's own
// buffer, so one thread moves the entries from the back. 0 history,
// 1 amax, 2 out, 3 n.
extern "C" __global__ void kiln_amax_history_update(KilnOpArgs a) {
  const float *history = (const float *)a.s[0].p;
  float *out = (float *)a.s[2].p;
  float amax = *(const float *)a.s[1].p;
  for (kiln_i64 i = a.s[3].i - 1; i > 0; --i)
    out[i] = history[i - 1];
  out[0] = amax;
}

// amax[index] = max |shard[begin, begin + size)|, NaN winning, as the bits
// of |x| compared as integers (order-free, so an integer atomicMax across
// blocks keeps it deterministic). amax starts at zero. 0 shard, 1 dtype,
// 2 begin, 3 size, 4 amax (f32), 5 index. Blocks of 256.
extern "C" __global__ void kiln_shard_amax(KilnOpArgs a) {
  __shared__ unsigned us[256];
  int t = (int)a.s[1].i;
  kiln_i64 begin = a.s[2].i, size = a.s[3].i;
  unsigned m = 0;
  for (kiln_i64 j = kiln_thread(); j < size; j += kiln_threads()) {
    unsigned u = __float_as_uint(kiln_load(a.s[0].p, t, begin + j)) & 0x7fffffffu;
    m = u > m ? u : m;
  }
  us[threadIdx.x] = m;
  __syncthreads();
  for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w && us[threadIdx.x + w] > us[threadIdx.x])
      us[threadIdx.x] = us[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    atomicMax((unsigned *)a.s[4].p + a.s[5].i, us[0]);
}

// scale[i] = 448 / max(amax[i], 1e-12) for i < count. 0 amax, 1 scales,
// 2 count.
extern "C" __global__ void kiln_shard_scales(KilnOpArgs a) {
  const float *amax = (const float *)a.s[0].p;
  for (kiln_i64 i = kiln_thread(); i < a.s[2].i; i += kiln_threads()) {
    float m = amax[i] < 1e-12f ? 1e-12f : amax[i];
    ((float *)a.s[1].p)[i] = 448.0f / m;
  }
}

// codes[begin + j] = e4m3(shard[begin + j] * scales[index]) for j < size.
// 0 shard, 1 dtype, 2 begin, 3 size, 4 scales, 5 index, 6 codes.
extern "C" __global__ void kiln_shard_quantize(KilnOpArgs a) {
  int t = (int)a.s[1].i;
  kiln_i64 begin = a.s[2].i, size = a.s[3].i;
  float scale = ((const float *)a.s[4].p)[a.s[5].i];
  for (kiln_i64 j = kiln_thread(); j < size; j += kiln_threads())
    kiln_store(a.s[6].p, KILN_E4M3, begin + j,
               kiln_load(a.s[0].p, t, begin + j) * scale);
}
)";

/// The weights of a shard op: (offset, size) in the flat buffer.
Expected<std::vector<std::pair<int64_t, int64_t>>> shardWeights(const Step &s) {
  const auto &offsets =
      std::get<std::vector<int64_t>>(s.step.attrs.at("offsets"));
  const auto &sizes = std::get<std::vector<int64_t>>(s.step.attrs.at("sizes"));
  if (offsets.size() != sizes.size())
    return s.fail("needs as many offsets as sizes");
  std::vector<std::pair<int64_t, int64_t>> weights;
  for (size_t i = 0; i < offsets.size(); ++i)
    weights.push_back({offsets[i], sizes[i]});
  return weights;
}

} // namespace

const char *fp8Source() { return kSource; }

Result shardOp(const Step &s, int rank) {
  bool quantize = s.step.kind == plan::Op::ShardQuantize;
  if (Error e = s.shaped(quantize ? 2 : 1, quantize ? 2 : 1, 0, {},
                         quantize ? std::initializer_list<int>{1}
                                  : std::initializer_list<int>{0}))
    return e;
  if (!isFloat(s.in(0).dtype))
    return s.fail("needs a float shard");
  if (quantize && s.out(0).dtype != DType::F8E4M3)
    return s.fail("writes f8e4m3 codes");
  if (quantize && s.out(1).dtype != DType::F32)
    return s.fail("writes f32 scales");
  auto weights = shardWeights(s);
  if (!weights)
    return weights.takeError();
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

Result delayedAmax(const Step &s) {
  if (Error e = s.shaped(1, 1, 2, {0}, {0}))
    return e;
  if (s.step.operands.size() > 1 && s.in(1).dtype != DType::F32)
    return s.fail("needs an f32 current amax");
  OpLaunchPlan p;
  p.launches.push_back(oneThread(
      "kiln_delayed_amax",
      {operand(0), integer(s.in(0).numElements()),
       integer(s.step.str("algo") == "max"),
       s.step.operands.size() > 1 ? operand(1) : integer(0), result(0)}));
  return p;
}

Result amaxHistoryUpdate(const Step &s) {
  if (Error e = s.shaped(2, 1, 0, {0, 1}, {0}))
    return e;
  int64_t n = s.in(0).numElements();
  if (n < 1 || s.out(0).numElements() != n)
    return s.fail("needs a non-empty history and a result of its size");
  OpLaunchPlan p;
  p.launches.push_back(oneThread(
      "kiln_amax_history_update",
      {operand(0), operand(1), result(0), integer(n)}));
  return p;
}

} // namespace kiln::runtime::cuda::kernels
