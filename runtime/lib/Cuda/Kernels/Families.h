//===- Families.h - The op kernels, one file per op family ------*- C++ -*-===//
//
// Internal to runtime/lib/Cuda/Kernels. Each family's file holds its
// kernels' CUDA C++ (a part of opKernelLibrarySource(), which Library.cpp
// puts together after the device prelude and the op kernels' helpers) and
// the launches of its plan ops (which opLaunchPlan, in Library.cpp,
// dispatches to).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_KERNELS_FAMILIES_H
#define KILN_RUNTIME_CUDA_KERNELS_FAMILIES_H

#include "Launch.h"

namespace kiln::runtime::cuda::kernels {


// Layout.cpp: reshape, unflatten (a copy from `srcOffset`), flatten,
// transpose.
const char *layoutSource();
Result copyLike(StepReader &r, int64_t srcOffset);
Result flatten(StepReader &r);
Result transpose(StepReader &r);

// Embedding.cpp.
const char *embeddingSource();
Result embedding(StepReader &r);
Result embeddingGrad(StepReader &r);

// Rope.cpp: rope (sign 1) and rope_grad (sign -1).
const char *ropeSource();
Result rope(StepReader &r, float sign);

// Attention.cpp.
const char *attentionSource();
Result attention(StepReader &r);
Result attentionGrad(StepReader &r);

// Loss.cpp: cross_entropy and cross_entropy_grad; loss parallel's
// index_to_float and vocab_parallel_* (max, stats, stats_grad, loss,
// loss_grad).
const char *lossSource();
Result crossEntropy(const Step &s, bool grad);
Result indexToFloat(const Step &s);
Result vocabParallel(const Step &s);

// Optim.cpp: grad_norm, lr_schedule, adamw (and adamwListLaunchPlan).
const char *optimSource();
Result gradNorm(const Step &s);
Result lrSchedule(const Step &s);
Result adamw(const Step &s);

// Fp8.cpp: delayed_amax, amax_history_update, shard_amax, shard_quantize.
const char *fp8Source();
Result delayedAmax(const Step &s);
Result amaxHistoryUpdate(const Step &s);
Result shardOp(const Step &s, int rank);

// MeanDivide.cpp (meanDivideLaunch) and CheckFinite.cpp
// (nonFiniteCheckLaunch): launched by the executor, not by plan ops.
const char *meanDivideSource();
const char *checkFiniteSource();

} // namespace kiln::runtime::cuda::kernels

#endif // KILN_RUNTIME_CUDA_KERNELS_FAMILIES_H
