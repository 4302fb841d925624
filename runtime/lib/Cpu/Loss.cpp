//===- Loss.cpp - Cross-entropy over the vocabulary -----------------------===//
//
// Rows are independent: threads split them, each row's log-sum-exp is a
// sequential double sum, and the per-row losses are added in row order
// afterwards, so the loss does not depend on the thread count.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Cpu/Loss.h"

#include "Parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace kiln::runtime::cpu {

using detail::parallelFor;

namespace {

int64_t rowGrain(int64_t vocab) {
  return std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(vocab, 1));
}

/// Fails on the first target outside [0, vocab).
Error checkTargets(const int32_t *targets, int64_t rows, int64_t vocab) {
  for (int64_t n = 0; n < rows; ++n)
    if (targets[n] < 0 || targets[n] >= vocab)
      return Error("cross_entropy: target " + std::to_string(targets[n]) +
                   " at row " + std::to_string(n) + " is outside [0, " +
                   std::to_string(vocab) + ")");
  return Error::success();
}

/// log(sum_v exp(x_v)) of one row: max-subtracted, exp in fp32, the sum and
/// the log in double.
double rowLogSumExp(const float *x, int64_t vocab) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i)
    m = std::max(m, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i)
    sum += std::exp(x[i] - m);
  return static_cast<double>(m) + std::log(sum);
}

} // namespace

Error crossEntropy(const float *logits, const int32_t *targets, float *loss,
                   int64_t rows, int64_t vocab) {
  if (Error e = checkTargets(targets, rows, vocab))
    return e;
  std::vector<double> rowLoss(rows);
  double *rl = rowLoss.data();
  parallelFor(rows, rowGrain(vocab), [=](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const float *x = logits + n * vocab;
      rl[n] = rowLogSumExp(x, vocab) - static_cast<double>(x[targets[n]]);
    }
  });
  double total = 0;
  for (double l : rowLoss)
    total += l;
  *loss = static_cast<float>(total / static_cast<double>(rows));
  return Error::success();
}

Error crossEntropyBackward(const float *logits, const int32_t *targets,
                           float dloss, float *dlogits, int64_t rows,
                           int64_t vocab) {
  if (Error e = checkTargets(targets, rows, vocab))
    return e;
  float scale =
      static_cast<float>(static_cast<double>(dloss) / static_cast<double>(rows));
  parallelFor(rows, rowGrain(vocab), [=](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const float *x = logits + n * vocab;
      float *dx = dlogits + n * vocab;
      float lse = static_cast<float>(rowLogSumExp(x, vocab));
      int64_t t = targets[n];
      for (int64_t i = 0; i < vocab; ++i) {
        float p = std::exp(x[i] - lse);
        dx[i] = (i == t ? p - 1.0f : p) * scale;
      }
    }
  });
  return Error::success();
}

} // namespace kiln::runtime::cpu
