//===- OpsInternal.h - Shared by the CPU op files ---------------*- C++ -*-===//

#ifndef KILN_RUNTIME_OPS_OPSINTERNAL_H
#define KILN_RUNTIME_OPS_OPSINTERNAL_H

#include "kiln/Runtime/CpuOps.h"

#include <string>
#include <vector>

namespace kiln::runtime::ops {

using Views = std::vector<View>;

/// Rows and width of a tensor seen as [rows, last dim].
inline int64_t lastDim(const View &v) { return v.shape.back(); }
inline int64_t rows(const View &v) { return v.numElements() / lastDim(v); }

#define KILN_CPU_OP(name)                                                      \
  std::string name(const PlanStep &step, const Views &in, const Views &out)

// Model ops (ModelOps.cpp).
KILN_CPU_OP(embedding);
KILN_CPU_OP(embeddingGrad);
KILN_CPU_OP(rmsNorm);
KILN_CPU_OP(rmsNormGrad);
KILN_CPU_OP(linear);
KILN_CPU_OP(linearGradInput);
KILN_CPU_OP(linearGradWeight);
KILN_CPU_OP(rope);
KILN_CPU_OP(ropeGrad);
KILN_CPU_OP(crossEntropy);
KILN_CPU_OP(crossEntropyGrad);
// Attention (AttentionOps.cpp).
KILN_CPU_OP(attention);
KILN_CPU_OP(attentionGrad);
// Elementwise, layout, optimizer (ElementwiseOps.cpp).
KILN_CPU_OP(silu);
KILN_CPU_OP(siluGrad);
KILN_CPU_OP(mul);
KILN_CPU_OP(add);
KILN_CPU_OP(copy);
KILN_CPU_OP(transpose);
KILN_CPU_OP(gradNorm);
KILN_CPU_OP(lrSchedule);
KILN_CPU_OP(adamw);

} // namespace kiln::runtime::ops

#endif // KILN_RUNTIME_OPS_OPSINTERNAL_H
