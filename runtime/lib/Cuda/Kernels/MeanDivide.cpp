//===- MeanDivide.cpp - The mean of a collective: CUDA C++ and launch -----===//
//
// A reduction "mean" is NCCL's sum divided by the rank count in place,
// in f32, rounded to the tensor's dtype, as the CPU executor does.
//
//===----------------------------------------------------------------------===//

#include "Families.h"
#include "Launch.h"

namespace kiln::runtime::cuda::kernels {

namespace {

const char *kSource = R"(
// x = x / divisor in f32, rounded to x's dtype. 0 x, 1 dtype, 2 n,
// 3 divisor.
extern "C" __global__ void kiln_mean_divide(KilnOpArgs a) {
  int t = (int)a.s[1].i;
  float d = (float)a.s[3].f;
  for (kiln_i64 i = kiln_thread(); i < a.s[2].i; i += kiln_threads())
    kiln_store(a.s[0].p, t, i, kiln_load(a.s[0].p, t, i) / d);
}
)";

} // namespace

const char *meanDivideSource() { return kSource; }

} // namespace kiln::runtime::cuda::kernels

namespace kiln::runtime::cuda {

using namespace kernels;

OpLaunchPlan meanDivideLaunch(DType dtype, int64_t n, int64_t divisor) {
  OpLaunchPlan p;
  p.launches.push_back(elementwise(
      "kiln_mean_divide", n,
      {result(0), code(dtype), integer(n),
       real(static_cast<double>(static_cast<float>(divisor)))}));
  return p;
}

} // namespace kiln::runtime::cuda
