//===- CpuOps.cpp - The table of the CPU backend's ops --------------------===//

#include "kiln/Runtime/CpuOps.h"
#include "ops/OpsInternal.h"

#include <map>

namespace kiln::runtime {

CpuOpFn findCpuOp(const std::string &op) {
  static const std::map<std::string, CpuOpFn> table = {
      {"embedding", ops::embedding},
      {"embedding_grad", ops::embeddingGrad},
      {"rms_norm", ops::rmsNorm},
      {"rms_norm_grad", ops::rmsNormGrad},
      {"linear", ops::linear},
      {"linear_grad_input", ops::linearGradInput},
      {"linear_grad_weight", ops::linearGradWeight},
      {"rope", ops::rope},
      {"rope_grad", ops::ropeGrad},
      {"attention", ops::attention},
      {"attention_grad", ops::attentionGrad},
      {"cross_entropy", ops::crossEntropy},
      {"cross_entropy_grad", ops::crossEntropyGrad},
      {"silu", ops::silu},
      {"silu_grad", ops::siluGrad},
      {"mul", ops::mul},
      {"add", ops::add},
      // The executor rounds every result to its dtype: a cast is a copy
      // through f32, and so is a reshape.
      {"cast", ops::copy},
      {"reshape", ops::copy},
      {"transpose", ops::transpose},
      {"grad_norm", ops::gradNorm},
      {"lr_schedule", ops::lrSchedule},
      {"adamw", ops::adamw},
  };
  auto it = table.find(op);
  return it == table.end() ? nullptr : it->second;
}

} // namespace kiln::runtime
