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

namespace {
/// Columns of the slice below the vocabulary's end (the rest is padding).
int64_t validColumns(int64_t slice, int64_t start, int64_t vocab) {
  return std::clamp<int64_t>(vocab - start, 0, slice);
}

/// Fails on the first target that is not an integer in [0, vocab).
Error checkFloatTargets(const char *op, const float *targets, int64_t rows,
                        int64_t vocab) {
  for (int64_t n = 0; n < rows; ++n)
    if (!(targets[n] >= 0.0f && targets[n] < static_cast<float>(vocab)) ||
        targets[n] != std::floor(targets[n]))
      return Error(std::string(op) + ": target " +
                   std::to_string(targets[n]) + " at row " + std::to_string(n) +
                   " is not an id in [0, " + std::to_string(vocab) + ")");
  return Error::success();
}
} // namespace

void vocabParallelMax(const float *logits, float *max, int64_t rows,
                      int64_t slice, int64_t start, int64_t vocab) {
  int64_t valid = validColumns(slice, start, vocab);
  parallelFor(rows, rowGrain(slice), [=](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const float *x = logits + n * slice;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < valid; ++i)
        m = std::max(m, x[i]);
      max[n] = m;
    }
  });
}

Error vocabParallelStats(const float *logits, const float *max,
                         const float *targets, float *stats, int64_t rows,
                         int64_t slice, int64_t start, int64_t vocab) {
  if (Error e = checkFloatTargets("vocab_parallel_stats", targets, rows, vocab))
    return e;
  int64_t valid = validColumns(slice, start, vocab);
  parallelFor(rows, rowGrain(slice), [=](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const float *x = logits + n * slice;
      double sum = 0;
      for (int64_t i = 0; i < valid; ++i)
        sum += std::exp(x[i] - max[n]);
      int64_t t = static_cast<int64_t>(targets[n]) - start;
      stats[2 * n] = static_cast<float>(sum);
      stats[2 * n + 1] = t >= 0 && t < valid ? x[t] : 0.0f;
    }
  });
  return Error::success();
}

Error vocabParallelStatsBackward(const float *dstats, const float *logits,
                                 const float *max, const float *targets,
                                 float *dlogits, int64_t rows, int64_t slice,
                                 int64_t start, int64_t vocab) {
  if (Error e = checkFloatTargets("vocab_parallel_stats_grad", targets, rows,
                                 vocab))
    return e;
  int64_t valid = validColumns(slice, start, vocab);
  parallelFor(rows, rowGrain(slice), [=](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const float *x = logits + n * slice;
      float *dx = dlogits + n * slice;
      int64_t t = static_cast<int64_t>(targets[n]) - start;
      for (int64_t i = 0; i < slice; ++i)
        dx[i] = i < valid ? dstats[2 * n] * std::exp(x[i] - max[n]) +
                                (i == t ? dstats[2 * n + 1] : 0.0f)
                          : 0.0f;
    }
  });
  return Error::success();
}

void vocabParallelLoss(const float *stats, const float *max, float *loss,
                       int64_t rows) {
  double total = 0;
  for (int64_t n = 0; n < rows; ++n)
    total += std::log(static_cast<double>(stats[2 * n])) +
             static_cast<double>(max[n]) -
             static_cast<double>(stats[2 * n + 1]);
  *loss = static_cast<float>(total / static_cast<double>(rows));
}

void vocabParallelLossBackward(float dloss, const float *stats, float *dstats,
                               int64_t rows) {
  double scale = static_cast<double>(dloss) / static_cast<double>(rows);
  for (int64_t n = 0; n < rows; ++n) {
    dstats[2 * n] =
        static_cast<float>(scale / static_cast<double>(stats[2 * n]));
    dstats[2 * n + 1] = static_cast<float>(-scale);
  }
}

} // namespace kiln::runtime::cpu
