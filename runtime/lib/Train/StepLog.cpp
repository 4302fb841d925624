//===- StepLog.cpp - What a run records of each step ----------------------===//

#include "kiln/Runtime/Train/StepLog.h"
#include "kiln/Runtime/Support/AtomicFile.h"

#include <cstdio>
#include <sstream>

namespace kiln::runtime {

namespace {
/// Keeps the metrics lines of steps <= `step` (a resumed run rewrites what
/// came after its checkpoint).
void truncateMetrics(const std::string &path, int64_t step) {
  std::ifstream in(path);
  if (!in)
    return;
  std::stringstream kept;
  std::string line;
  while (std::getline(in, line)) {
    long long s = 0;
    if (std::sscanf(line.c_str(), "{\"step\": %lld", &s) == 1 && s <= step)
      kept << line << "\n";
  }
  in.close();
  (void)writeFileAtomically(path, kept.str());
}
} // namespace

StepRecord measureStep(const TrainOptions &options, const Executor &exec,
                       int64_t step, double loss, double lr, double gradNorm,
                       double tokensPerSecond) {
  StepRecord r;
  r.step = step;
  r.loss = loss;
  r.lr = lr;
  r.gradNorm = gradNorm;
  r.tokensPerSecond = tokensPerSecond;
  r.tokensPerDevice = tokensPerSecond / static_cast<double>(exec.plan().ranks);
  if (options.modelFlopsPerToken > 0) {
    r.tflops = r.tokensPerDevice * options.modelFlopsPerToken / 1e12;
    if (options.peakTflops > 0)
      r.mfu = 100 * *r.tflops / options.peakTflops;
  }
  r.peakMemoryGib = static_cast<double>(exec.peakMemoryBytes()) /
                    static_cast<double>(int64_t(1) << 30);
  return r;
}

Error StepLog::open(const std::string &metricsPath, int64_t resumedStep,
                    const std::string &tensorBoardDir) {
  if (resumedStep > 0)
    truncateMetrics(metricsPath, resumedStep);
  metrics.open(metricsPath, resumedStep > 0 ? std::ios::app : std::ios::trunc);
  if (!metrics)
    return Error("cannot write '" + metricsPath + "'");
  // Losses and norms to float precision (9 significant digits), so that
  // runs can be compared to 1e-8 relative from their metrics.
  metrics.precision(9);
  if (tensorBoardDir.empty())
    return Error::success();
  Expected<std::unique_ptr<TensorBoardWriter>> created =
      TensorBoardWriter::create(tensorBoardDir);
  if (!created)
    return created.takeError();
  board_ = std::move(*created);
  return Error::success();
}

Error StepLog::step(const StepRecord &r) {
  metrics << "{\"step\": " << r.step << ", \"loss\": " << r.loss
          << ", \"lr\": " << r.lr << ", \"grad_norm\": " << r.gradNorm
          << ", \"tokens_per_s\": " << r.tokensPerSecond
          << ", \"tokens_per_s_per_device\": " << r.tokensPerDevice;
  if (r.tflops)
    metrics << ", \"tflops\": " << *r.tflops;
  if (r.mfu)
    metrics << ", \"mfu\": " << *r.mfu;
  metrics << ", \"peak_memory_gib\": " << r.peakMemoryGib << "}\n";
  metrics.flush(); // visible while a long validation runs
  if (!board_)
    return Error::success();
  std::vector<std::pair<std::string, double>> scalars = {
      {"loss_metrics/global_avg_loss", r.loss},
      {"lr", r.lr},
      {"grad_norm", r.gradNorm},
      {"throughput(tps)", r.tokensPerDevice},
      {"memory/max_reserved(GiB)", r.peakMemoryGib}};
  if (r.tflops)
    scalars.push_back({"tflops", *r.tflops});
  if (r.mfu)
    scalars.push_back({"mfu(%)", *r.mfu});
  return board_->scalars(r.step, scalars);
}

Error StepLog::validation(int64_t step, double loss) {
  metrics << "{\"step\": " << step << ", \"val_loss\": " << loss << "}\n";
  metrics.flush();
  if (!board_)
    return Error::success();
  return board_->scalars(step, {{"loss_metrics/val_loss", loss}});
}

} // namespace kiln::runtime
