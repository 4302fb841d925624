//===- LossPlot.h - The loss curve of a run as a PNG ------------*- C++ -*-===//
//
// Drawn by matplotlib (Debian's python3-matplotlib, run as
// /usr/bin/python3) from metrics.jsonl: training loss per step and the
// validation loss where it was measured.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TRAIN_LOSSPLOT_H
#define KILN_RUNTIME_TRAIN_LOSSPLOT_H

#include "kiln/Runtime/Support/Error.h"

#include <optional>
#include <string>

namespace kiln::runtime {

/// Writes `pngPath` from the metrics lines in `metricsPath`; returns why
/// not when it cannot (no python3 or matplotlib, no metrics).
Error plotLossCurve(const std::string &metricsPath, const std::string &pngPath);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_TRAIN_LOSSPLOT_H
