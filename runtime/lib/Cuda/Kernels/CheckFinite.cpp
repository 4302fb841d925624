//===- CheckFinite.cpp - The per-op numerics check: CUDA C++ and launch ---===//
//
// With numerics checking on, each result of each step is looked at on
// the device; a 64-bit flag keeps the earliest non-finite value of the
// run (step, result, element), and the executor reads it once per run.
//
//===----------------------------------------------------------------------===//

#include "Families.h"
#include "Launch.h"

#include <algorithm>

namespace kiln::runtime::cuda::kernels {

namespace {

const char *kSource = R"(
// The per-op numerics check: a tensor's first non-finite value, as the
// key base | element << 1 | (infinity ? 1 : 0), complemented and merged
// into the flag by atomicMax, so that the flag (zero: none) ends as the
// smallest key of the run: the earliest step, result and element.
// 0 tensor, 1 flag (u64), 2 dtype, 3 n, 4 key base, 5 largest element.
extern "C" __global__ void kiln_check_finite(KilnOpArgs a) {
  int t = (int)a.s[2].i;
  kiln_i64 n = a.s[3].i, most = a.s[5].i;
  unsigned long long best = 0;
  for (kiln_i64 i = kiln_thread(); i < n; i += kiln_threads()) {
    float x = kiln_load(a.s[0].p, t, i);
    if (isfinite(x))
      continue;
    unsigned long long key = (unsigned long long)a.s[4].i |
                             ((unsigned long long)(i < most ? i : most) << 1) |
                             (isnan(x) ? 0ull : 1ull);
    if (~key > best)
      best = ~key;
  }
  if (best)
    atomicMax((unsigned long long *)a.s[1].p, best);
}
)";

} // namespace

const char *checkFiniteSource() { return kSource; }

} // namespace kiln::runtime::cuda::kernels

namespace kiln::runtime::cuda {

using namespace kernels;

namespace {
// The key of a non-finite value: step (20 bits), result (6), element (37),
// NaN or infinity (1).
constexpr int kKeyStepShift = 44, kKeyResultShift = 38;
constexpr int64_t kKeyMostElement = (int64_t{1} << 37) - 1;
} // namespace

std::optional<OpKernelLaunch> nonFiniteCheckLaunch(DType dtype, int64_t n,
                                                   int64_t step, int result) {
  if (step < 0 || step >= (int64_t{1} << 20) || result < 0 || result >= 64 ||
      !isFloat(dtype))
    return std::nullopt;
  int64_t key = (step << kKeyStepShift) |
                (static_cast<int64_t>(result) << kKeyResultShift);
  return elementwise("kiln_check_finite", n,
                     {operand(0), operand(1), code(dtype), integer(n),
                      integer(key), integer(kKeyMostElement)});
}

std::optional<NonFinite> decodeNonFinite(uint64_t flag) {
  if (flag == 0)
    return std::nullopt;
  uint64_t key = ~flag;
  NonFinite f;
  f.step = static_cast<int64_t>(key >> kKeyStepShift);
  f.result = static_cast<int>((key >> kKeyResultShift) & 63);
  f.element = static_cast<int64_t>((key >> 1) & kKeyMostElement);
  f.nan = (key & 1) == 0;
  return f;
}

std::string NonFinite::describe() const {
  return std::string(nan ? "NaN" : "infinity") + " in its result " +
         std::to_string(result) + " at element " + std::to_string(element);
}

} // namespace kiln::runtime::cuda
