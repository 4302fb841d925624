//===- StepLog.h - What a run records of each step --------------*- C++ -*-===//
//
// The metrics of a training run, in one place: `metrics.jsonl` (one JSON
// line per step and one per validation; the fields below) and, when asked,
// TensorBoard event files holding the same values under TorchTitan's tag
// names (TensorBoard.h). `kiln report`, scripts/train-report and the tests
// read these names.
//
//   step line:        step, loss, lr, grad_norm, tokens_per_s (all
//                     devices), tokens_per_s_per_device, tflops and mfu
//                     (when known), peak_memory_gib
//   validation line:  step, val_loss
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TRAIN_STEPLOG_H
#define KILN_RUNTIME_TRAIN_STEPLOG_H

#include "kiln/Runtime/Executor.h"
#include "kiln/Runtime/Support/Error.h"
#include "kiln/Runtime/Train/TensorBoard.h"
#include "kiln/Runtime/Train/Trainer.h"

#include <fstream>
#include <memory>
#include <optional>
#include <string>

namespace kiln::runtime {

/// One step's values.
struct StepRecord {
  int64_t step = 0;
  double loss = 0, lr = 0, gradNorm = 0;
  double tokensPerSecond = 0, tokensPerDevice = 0;
  std::optional<double> tflops, mfu; // MFU in percent
  double peakMemoryGib = 0;
};

/// A step's record from what the loop measured: throughput per device,
/// model TFLOP/s and MFU from `options` (modelFlopsPerToken, peakTflops),
/// the executor's peak memory.
StepRecord measureStep(const TrainOptions &options, const Executor &exec,
                       int64_t step, double loss, double lr, double gradNorm,
                       double tokensPerSecond);

class StepLog {
public:
  /// Opens `metricsPath` (rank 0's; /dev/null on the others), keeping the
  /// lines of steps up to `resumedStep` when it is above 0, and event files
  /// in `tensorBoardDir` unless it is empty.
  Error open(const std::string &metricsPath, int64_t resumedStep,
             const std::string &tensorBoardDir);
  Error step(const StepRecord &record);
  Error validation(int64_t step, double loss);
  /// The event file, or nullptr without one.
  const TensorBoardWriter *board() const { return board_.get(); }
  void close() { metrics.close(); }

private:
  std::ofstream metrics;
  std::unique_ptr<TensorBoardWriter> board_;
};

} // namespace kiln::runtime

#endif // KILN_RUNTIME_TRAIN_STEPLOG_H
