//===- PlanSearch.h - `kiln plan`'s candidates and results ------*- C++ -*-===//
//
// What the search (PlanSearch.cpp) and its report (PlanReport.cpp) share:
// a configuration the planner tries, its prediction, and what the search
// counted.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DRIVER_LIB_PLANSEARCH_H
#define KILN_DRIVER_LIB_PLANSEARCH_H

#include "kiln/Driver/Driver.h"
#include "kiln/Driver/Predict.h"

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::plansearch {

/// The probes' layers a stage: kProbe and kProbe + 1 (under a layer
/// policy, Candidate::probeLayers). The step's time grows by the same
/// amount with every layer from 2 on; the bytes live at the arena's peak
/// from 3 on (measured, docs/perf-model.md).
constexpr int64_t kProbe = 3;
/// How far below the whole compile's the extrapolated peak memory came out
/// (7.2% under pipeline parallel, docs/perf-model.md), rounded up: an
/// extrapolated configuration predicted within this of the memory may not
/// fit, and is listed as such.
constexpr double kMemoryLow = 0.08;

struct Candidate {
  int64_t order = 0; // in the search, for ties
  int64_t dp = 1, tp = 1, pp = 1, microbatch = 1;
  std::string schedule; // pp > 1
  std::string ac = "none";
  /// Under `selective`, its policy: Kiln's `gemm`, TorchTitan's `op`, or
  /// TorchTitan's layer policy (a number: every N-th block).
  std::string policy;
  std::string fp8; // empty: bf16
  bool fp8AllGather = false;

  int64_t stages() const { return schedule == "Interleaved1F1B" ? 2 * pp : pp; }
  std::string meshText() const {
    return std::to_string(dp) + " x " + std::to_string(tp) + " x " +
           std::to_string(pp);
  }
  std::string scheduleText() const {
    return pp == 1 ? "-"
                   : schedule + " (mb " + std::to_string(microbatch) + ")";
  }
  std::string acText() const {
    return ac == "selective" ? ac + " " + policy : ac;
  }
  /// Whether this mode recomputes nothing `other` does not recompute (so
  /// `other`, where this one fits, only adds work): none comes before every
  /// mode, every mode before full, and `gemm` (each block's elementwise
  /// ops) before `op` (those, and three of its GEMMs). The layer policy
  /// recomputes every op of half the blocks and nothing of the others,
  /// neither more nor less than `gemm` or `op`.
  bool recomputesWithin(const Candidate &other) const {
    return ac == "none" || other.ac == "full" ||
           (ac == other.ac && policy == other.policy) ||
           (policy == "gemm" && other.policy == "op");
  }
  /// Every how many blocks the step repeats itself: under a layer policy
  /// its N, else 1.
  int64_t period() const {
    int64_t every = 1;
    if (ac == "selective" && policy != "gemm" && policy != "op")
      (void)llvm::StringRef(policy).getAsInteger(10, every);
    return every;
  }
  /// The smaller probe's layers a stage, and the larger's above it: a
  /// whole period apart, and the smaller as many periods short of the
  /// model's `layers` (its blocks' checkpointing then repeats the step's,
  /// block for block from the first, the last included).
  std::pair<int64_t, int64_t> probeLayers(int64_t layers) const {
    int64_t n = period();
    return {kProbe + (layers - kProbe) % n, n};
  }
  std::string fp8Text() const {
    return fp8.empty() ? "bf16" : fp8 + (fp8AllGather ? " + FP8 AG" : "");
  }
};

struct Evaluated {
  Candidate c;
  StepPrediction p;
  bool exact = false;
  /// Only whether it fits decided: `p` holds its peak (a lower bound where
  /// it does not fit) and nothing else (Planner::Depth::Decide).
  bool memoryOnly = false;
  std::vector<std::string> overrides;
  /// With --exact, what the extrapolation had predicted.
  std::optional<StepPrediction> extrapolated;

  /// Extrapolated within the extrapolation's error below `hbmGiB`.
  bool mayNotFit(double hbmGiB) const {
    return !exact && p.peakGiB() > hbmGiB * (1 - kMemoryLow);
  }
};

/// What a search counted.
struct Tally {
  /// why -> how many, and the first configuration it happened to.
  std::map<std::string, std::pair<int64_t, std::string>> invalid;
  int64_t tried = 0, evaluated = 0, tooBig = 0, dominated = 0, compiles = 0;
  /// Of tooBig, those not compiled: their group's full checkpointing, which
  /// keeps the least, does not fit (Search::group).
  int64_t pastFull = 0;
};

/// The report: `fit`, the configurations ranked, as a table or (--json)
/// one object.
void printPlan(const PlanCommand &command, const perf::Hardware &hw,
               const perf::Efficiency &eff, const std::string &model,
               int64_t batch, int64_t seq, const Tally &all, double seconds,
               const std::vector<Evaluated> &fit);

} // namespace kiln::plansearch

#endif // KILN_DRIVER_LIB_PLANSEARCH_H
