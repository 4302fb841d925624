//===- OpKernelTolerance.cpp - How far an op kernel may be from the CPU ---===//
//
// OpKernelTolerance.h: the numbers are stated in docs/cuda-op-kernels.md.
//
//===----------------------------------------------------------------------===//

#include "OpKernelTolerance.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace kiln::runtime::opcheck {

double ulpOf(DType t, float x) {
  int bits = t == DType::F32      ? 23
             : t == DType::BF16   ? 7
             : t == DType::F8E4M3 ? 3
                                  : 2;
  int minExp = t == DType::F8E4M3 ? -6 : t == DType::F8E5M2 ? -14 : -126;
  int e = 0;
  std::frexp(std::fabs(static_cast<double>(x)), &e);
  int lead = x == 0 ? minExp : std::max(e - 1, minExp);
  return std::ldexp(1.0, lead - bits);
}

/// The stated tolerance of `op` (docs/cuda-op-kernels.md). On the host
/// only attention's forward (online softmax: another order of exp and
/// sums), cross-entropy, the gradient norm and loss parallel's statistics
/// and loss (double sums as trees) are not bit for bit; on a GPU, CUDA's
/// expf, logf, pow, sin and cos are not the host's libm either.
/// AdamW over a list of parameters (kiln_adamw_list) has adamw's.
Tolerance toleranceOf(plan::Op op, bool gpu) {
  switch (op) {
  case plan::Op::Attention:
    return {2, 1e-6};
  case plan::Op::CrossEntropy:
  case plan::Op::GradNorm:
    return {gpu ? 4.0 : 2.0, 0};
  // On a GPU, lse (a double sum of CUDA's expf terms, rounded to f32) can
  // round to the neighbouring f32: at ln(vocab) in [8, 16) that moves
  // exp(x - lse) by up to 16 ulp, x - lse rounds again (up to 8 more) and
  // expf adds 2. Measured on an H100: 27 ulp (docs/cuda-op-kernels.md).
  case plan::Op::CrossEntropyGrad:
    return {gpu ? 40.0 : 1.0, 0};
  // A double sum in another order, rounded to f32: at most the neighbour.
  case plan::Op::VocabParallelLoss:
    return {1, 0};
  case plan::Op::VocabParallelStats:
    return {gpu ? 4.0 : 1.0, 0};
  // CUDA's expf; the target's column adds dstats[n, 1], which may cancel.
  case plan::Op::VocabParallelStatsGrad:
    return {gpu ? 4.0 : 0.0, gpu ? 1e-6 : 0.0};
  case plan::Op::Rope:
  case plan::Op::RopeGrad:
  case plan::Op::LrSchedule:
    return {gpu ? 1.0 : 0.0, 0};
  case plan::Op::AdamW:
    return {gpu ? 4.0 : 0.0, 0};
  default:
    return {};
  }
}

/// cuDNN's fused SDPA against the CPU backend, per result. Its tensor
/// cores take P rounded to bf16 into P V (and dS into the backward's
/// products), so out, dq, dk and dv get a share of the result's largest
/// magnitude; lse (f32) comes from f32 sums of the same bf16 products.
/// Measured on an H100 (cuDNN 9.14): 5.4e-3 of the largest magnitude in
/// the forward, 7.0e-3 in the backward.
Tolerance cudnnToleranceOf(plan::Op op, size_t result) {
  if (op == plan::Op::Attention)
    return result == 1 ? Tolerance{64, 1e-5} : Tolerance{2, 1e-2};
  return {2, 2e-2};
}

std::string toleranceText(Tolerance t) {
  if (t.ulps == 0 && t.ofMax == 0)
    return "bit for bit";
  char text[96];
  std::snprintf(text, sizeof text, "tolerance %g ulp", t.ulps);
  if (t.ofMax > 0)
    std::snprintf(text + std::strlen(text), sizeof text - std::strlen(text),
                  " + %g of the largest magnitude", t.ofMax);
  return text;
}

std::string toleranceText(plan::Op op, bool gpu) {
  return toleranceText(toleranceOf(op, gpu));
}

} // namespace kiln::runtime::opcheck
