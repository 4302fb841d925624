//===- Fp8.cpp - The FP8 all-gather's casts on one shard ------------------===//
//
// amax and e4m3 codes per weight of a flat shard; the conversions
// themselves are the shared ones (kiln/Runtime/Numerics/Fp8.h).
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Cpu/Fp8.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace kiln::runtime::cpu {

namespace {
/// The part of `w` in [first, first + n), relative to `first`.
std::pair<int64_t, int64_t> within(const FlatRange &w, int64_t first,
                                   int64_t n) {
  int64_t begin = std::max(w.offset, first);
  int64_t end = std::min(w.offset + w.size, first + n);
  return {begin - first, std::max<int64_t>(0, end - begin)};
}
} // namespace

void shardAmax(const float *shard, int64_t n, int64_t first,
               const FlatRange *weights, int64_t count, float *amax) {
  for (int64_t i = 0; i < count; ++i) {
    auto [begin, size] = within(weights[i], first, n);
    // NaN wins, as in a fused group's amax store.
    float m = 0.0f;
    for (int64_t j = begin; j < begin + size; ++j) {
      float a = std::fabs(shard[j]);
      m = std::isnan(a) || std::isnan(m) ? a + m : std::max(m, a);
    }
    amax[i] = m;
  }
}

void shardQuantizeE4m3(const float *shard, int64_t n, int64_t first,
                       const FlatRange *weights, int64_t count,
                       const float *amax, uint8_t *codes, float *scales) {
  std::fill(codes, codes + n, uint8_t(0));
  for (int64_t i = 0; i < count; ++i) {
    // As kiln.quantize: f32 division and product.
    float scale = 448.0f / std::max(amax[i], 1e-12f);
    scales[i] = scale;
    auto [begin, size] = within(weights[i], first, n);
    for (int64_t j = begin; j < begin + size; ++j)
      codes[j] = toE4m3(shard[j] * scale);
  }
}

} // namespace kiln::runtime::cpu
