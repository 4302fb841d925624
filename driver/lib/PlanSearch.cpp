//===- PlanSearch.cpp - `kiln plan` ---------------------------------------===//
//
// The parallelism a run should use (issue #19, docs/perf-model.md, "The
// planner"): every mesh dp_shard x tp x pp of the GPUs, pipeline schedule
// and microbatch size, activation checkpointing mode and FP8 recipe (with
// or without the FP8 all-gather) that Kiln can compile, each predicted as
// `kiln explain --perf` predicts it; those that do not fit are dropped and
// the rest ranked by tokens/s per GPU.
//
// Each configuration is compiled with 3 and with 4 layers per stage (the
// first, a middle and the last pp position only, with pp + 2 microbatches
// or three rounds of pp), and the step is extrapolated to the model's
// layers and microbatches: every layer adds the same ops (the same shapes,
// the same collectives), and every microbatch between the first and the
// last repeats the same units.
// docs/perf-model.md gives the measured agreement with whole compiles;
// --exact compiles the finalists whole and ranks them by those figures.
//
//===----------------------------------------------------------------------===//

#include "PlanSearch.h"
#include "kiln/Driver/Session.h"
#include "kiln/Frontend/ModelImporter.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <limits>
#include <set>
#include <thread>

using namespace kiln;
using namespace kiln::plansearch;

namespace {

/// The deepest pipeline searched. Every configuration of `gpus` GPUs the
/// planner tries: tp inside a node, pp up to kMaxPipeline with at least as
/// many microbatches as pp ranks (fewer leave each rank idle most of the
/// step) and 2 layers a stage, in an order where a mode of activation
/// checkpointing comes before those that recompute more (the dominance
/// rule, runPlan).
constexpr int64_t kMaxPipeline = 8;
/// TorchTitan's layer policy searched (selective_ac_option = "2", its
/// default: every second block checkpointed whole, the others not at all),
/// without pp only: a stage's blocks are checkpointed by their index in
/// the model, which the probes' stages do not keep.
constexpr int64_t kLayerPolicy = 2;
/// How far above the whole compile's the extrapolated peak memory came out
/// (12.3% at most over 8B's finalists with first-fit arenas; +2.7% since
/// the largest-first placement, docs/perf-model.md), with room: --exact
/// also compiles whole what it predicts within this of the memory.
constexpr double kMemoryMargin = 0.15;
/// TorchTitan's split points for `layers` over `stages`: the layers that do
/// not divide evenly go to the middle stages first (the first holds the
/// embedding, the last the output projection and the loss).
std::vector<int64_t> stageSizes(int64_t layers, int64_t stages) {
  std::vector<int64_t> sizes(stages, layers / stages);
  int64_t extra = layers % stages;
  for (int64_t s = 1; s + 1 < stages && extra > 0; ++s, --extra)
    ++sizes[s];
  for (int64_t s = 0; extra > 0; s = stages - 1, --extra)
    ++sizes[s];
  return sizes;
}

/// The keys the planner sets: the candidate's, on top of the user's, at
/// `layers` layers and `batch` sequences per step.
std::vector<std::string> overridesOf(const Candidate &c,
                                     const std::vector<std::string> &base,
                                     int64_t layers, int64_t batch,
                                     int64_t seq) {
  std::vector<std::string> o = base;
  auto set = [&](const std::string &key, const std::string &value) {
    o.push_back(key + "=" + value);
  };
  set("model.n_layers", std::to_string(layers));
  set("training.global_batch_size", std::to_string(batch));
  set("training.seq_len", std::to_string(seq));
  set("parallelism.tensor_parallel_degree", std::to_string(c.tp));
  set("parallelism.pipeline_parallel_degree", std::to_string(c.pp));
  if (c.pp > 1) {
    set("parallelism.pipeline_parallel_schedule", "\"" + c.schedule + "\"");
    set("parallelism.pipeline_parallel_microbatch_size",
        std::to_string(c.microbatch));
    if (layers % c.stages() != 0) {
      std::string points = "[";
      int64_t start = 0;
      std::vector<int64_t> sizes = stageSizes(layers, c.stages());
      for (size_t s = 0; s + 1 < sizes.size(); ++s) {
        start += sizes[s];
        points += (s ? ", " : "") + std::string("\"layers.") +
                  std::to_string(start) + "\"";
      }
      set("parallelism.pipeline_parallel_split_points", points + "]");
    }
  }
  set("activation_checkpoint.mode", "\"" + c.ac + "\"");
  if (c.ac == "selective")
    set("activation_checkpoint.selective_ac_option", "\"" + c.policy + "\"");
  set("float8.enable", c.fp8.empty() ? "false" : "true");
  if (!c.fp8.empty()) {
    set("float8.recipe", "\"" + c.fp8 + "\"");
    set("float8.enable_fsdp_float8_all_gather",
        c.fp8AllGather ? "true" : "false");
  }
  return o;
}

class Planner {
public:
  Planner(const PlanCommand &command, const perf::Hardware &hw,
          const perf::Efficiency &eff, int64_t layers, int64_t batch,
          int64_t seq)
      : command(command), hw(hw), eff(eff), layers(layers), batch(batch),
        seq(seq) {
    options.useCache = false;
    options.quiet = true;
    options.stepOnly = true;
    options.verifyEachPass = false;
    // The probes' buffers counted, not placed, until the count leaves what
    // fits open (extrapolated). --exact keeps every probe's placed bytes:
    // those within kMemoryMargin above the memory are compiled whole.
    options.placeBuffers = command.exact;
  }

  /// How far `evaluate` goes: the step predicted (extrapolated from
  /// small compiles, or compiled whole when the model is that small), the
  /// same compiled whole, or only whether it fits.
  enum class Depth { Predict, Whole, Decide };
  /// The candidate's predicted step; nothing and `error` when Kiln cannot
  /// compile it. With Depth::Decide, where it is extrapolated, only what
  /// fits is decided, as Predict decides it (`memoryOnly`: `p` holds its
  /// peak, a lower bound where it does not fit); where it fits, its probes
  /// are kept untimed, and a later Predict of it times them.
  std::optional<Evaluated> evaluate(const Candidate &c, Depth depth,
                                    std::string &error);
  /// Drops the probes Depth::Decide kept (those of a group's candidates,
  /// once the group is done).
  void dropDecided() { decided.clear(); }
  int64_t compiles = 0;

private:
  std::optional<StepPrediction> extrapolated(const Candidate &c,
                                             const Config &config,
                                             bool decideOnly,
                                             std::string &error);
  /// By candidate order, the probes a Depth::Decide evaluation left open,
  /// and the position where it stopped (their placement next; every
  /// position's done: their timing next).
  std::map<int64_t,
           std::pair<std::vector<std::array<CompiledPosition, 2>>, size_t>>
      decided;

  const PlanCommand &command;
  const perf::Hardware &hw;
  const perf::Efficiency &eff;
  int64_t layers, batch, seq;
  PredictOptions options;
};

std::optional<Evaluated> Planner::evaluate(const Candidate &c, Depth depth,
                                           std::string &error) {
  Evaluated out;
  out.c = c;
  out.overrides = overridesOf(c, command.overrides, layers, batch, seq);
  ModelSession session;
  session.quiet = true;
  if (!session.load(command.model, out.overrides, command.gpus)) {
    error = session.firstError;
    return std::nullopt;
  }
  const Config &config = *session.config;
  std::optional<StepPrediction> p;
  auto [probe, apart] = c.probeLayers(layers);
  if (depth == Depth::Whole || layers <= (probe + apart) * c.stages()) {
    std::optional<Config> loaded;
    compiles += c.pp;
    // Compiled whole, every position is timed: placed from the start.
    PredictOptions whole = options;
    whole.placeBuffers = true;
    p = predictStep(command.model, out.overrides, command.gpus, hw, eff, whole,
                    loaded, error);
    out.exact = true;
  } else {
    p = extrapolated(c, config, depth == Depth::Decide, error);
    // Where it does not fit, the verdict is the prediction's.
    out.memoryOnly = decided.count(c.order) > 0;
  }
  if (!p)
    return std::nullopt;
  out.p = *p;
  return out;
}

std::optional<StepPrediction> Planner::extrapolated(const Candidate &c,
                                                    const Config &config,
                                                    bool decideOnly,
                                                    std::string &error) {
  int64_t stages = c.stages(), perRank = stages / c.pp;
  auto [smaller, apart] = c.probeLayers(layers);
  // The probes: kProbe and kProbe + 1 layers a stage (under a layer policy,
  // without pp: a period apart, probeLayers), and the fewest
  // microbatches that hold every kind of unit the step's have, so that the
  // arena's fullest step is one of the step's: on every rank a first and a
  // last microbatch, and between them a backward with as many microbatches
  // in flight as the step's and a forward still to come (1F1B: pp + 2;
  // Interleaved1F1B, in rounds of pp: 3 pp; with fewer, the peak came out
  // up to 8% low, measured in docs/perf-model.md). Time per unit and per
  // microbatch's accumulation is by phase (positionCost), so the step's
  // microbatches are timed exactly.
  int64_t probeMicrobatches =
      std::min(config.microbatches(),
               c.schedule == "Interleaved1F1B" ? 3 * c.pp : c.pp + 2);
  int64_t probeBatch =
      c.pp > 1 ? c.dp * c.microbatch * probeMicrobatches : batch;
  // A bound, when memory alone decides: the configuration does not fit.
  // (`atLeast`: the step needs more than those bytes, or may: a count, a
  // probe, or not every position extrapolated.)
  auto tooBig = [&](int64_t bytes, bool atLeast) {
    StepPrediction bound;
    bound.mesh = config.runMesh();
    bound.peakBytes = bytes;
    bound.peakAtLeast = atLeast;
    bound.step = std::numeric_limits<double>::infinity();
    return bound;
  };
  double hbm = hw.hbmGiB * double(int64_t(1) << 30);
  // Each probe position stands for the pp positions of its kind: the
  // first, the middle ones, the last (the first, which holds the most in
  // flight, first: most configurations that do not fit stop there).
  std::vector<int64_t> probed = {0};
  if (c.pp > 2)
    probed.push_back(1);
  if (c.pp > 1)
    probed.push_back(c.pp - 1);
  // The probes compiled, and what fits decided from their memory alone;
  // only then are they timed (writing and reading a plan is two thirds of
  // a compile), and most configurations do not fit. Without --exact, each
  // probe's arena is first only counted (its bytes live, the least any
  // placement needs: a probe or an extrapolation past the memory by that
  // count is past it placed), and placed only where the count leaves the
  // verdict open; that verdict is then the one placing every probe gives.
  // What the count drops reports the count (a lower bound) as its peak.
  std::vector<std::array<CompiledPosition, 2>> compiled(probed.size());
  // Where a Depth::Decide evaluation stopped, resumed: the position whose
  // probes it compiled and counted, not yet placed.
  size_t from = 0;
  bool resumed = false;
  if (auto kept = decided.find(c.order); kept != decided.end()) {
    compiled = std::move(kept->second.first);
    from = kept->second.second;
    decided.erase(kept);
    resumed = true;
  }
  // Each position of the probe `i`'s kind, its cost from the probe's two
  // (`time`: with the time, else the bytes only).
  auto positionsOf = [&](size_t i, bool time,
                         const std::array<PositionCost, 2> &probe) {
    int64_t from = probed[i];
    std::vector<std::pair<int64_t, PositionCost>> out;
    for (int64_t p = 0; p < c.pp; ++p) {
      if ((p == 0) != (from == 0) || (p == c.pp - 1) != (from == c.pp - 1))
        continue;
      // The position's own layers (stages may differ by one), its stages'
      // units shifted to its own.
      std::map<int64_t, double> stageT;
      int64_t held = c.pp == 1 ? layers : 0;
      for (int64_t s = p; c.pp > 1 && s < stages; s += c.pp) {
        auto [first, last] = config.stageLayers(s);
        held += last - first;
        stageT[s - p + from] = double(last - first - smaller) / double(apart);
      }
      double t = double(held - smaller * perRank) / double(perRank * apart);
      PositionCost e = extrapolate(probe[0], probe[1], t, stageT);
      auto shift = [&](std::map<int64_t, double> &byStage) {
        std::map<int64_t, double> moved;
        for (const auto &[s, v] : byStage)
          moved[s - from + p] = v;
        byStage = std::move(moved);
      };
      for (int phase = 0; time && phase < kPhases; ++phase) {
        shift(e.forward[phase]);
        shift(e.backward[phase]);
      }
      out.emplace_back(p, std::move(e));
    }
    return out;
  };
  // The largest peak `decide` found (Depth::Decide's where it is open).
  int64_t largestSoFar = 0;
  // The largest peak of probe i's kind of position, extrapolated from its
  // probes' memory (counted or placed); a verdict when it does not fit.
  auto decide = [&](size_t i) -> std::optional<StepPrediction> {
    int64_t largest = 0;
    for (const auto &[p, e] :
         positionsOf(i, false, {compiled[i][0].memory, compiled[i][1].memory}))
      largest = std::max(largest, e.peakBytes);
    largestSoFar = std::max(largestSoFar, largest);
    // Past the margin --exact recompiles within: no other position changes
    // the verdict. Without --exact, what does not fit is only counted: its
    // time is not needed (with --exact, one within the margin may be
    // compiled whole, in the order of its predicted time).
    if (double(largest) > hbm * (command.exact ? 1 + kMemoryMargin : 1))
      return tooBig(largest,
                    !compiled[i][1].memory.placed || i + 1 < probed.size());
    return std::nullopt;
  };
  // Memory only grows with the layers and the microbatches in flight: a
  // probe that does not fit says the configuration does not either.
  auto pastMemory = [&](const CompiledPosition &probe) {
    return double(probe.memory.peakBytes) > hbm;
  };
  for (size_t i = from; i < probed.size(); ++i) {
    if (!resumed || i > from) {
      for (int k = 0; k < 2; ++k) {
        ++compiles;
        std::optional<CompiledPosition> probe = compilePosition(
            command.model,
            overridesOf(c, command.overrides, (smaller + k * apart) * stages,
                        probeBatch, seq),
            command.gpus, config.runMesh(), probed[i], eff, options, error);
        if (!probe)
          return std::nullopt;
        if (pastMemory(*probe))
          return tooBig(probe->memory.peakBytes, true);
        compiled[i][k] = *std::move(probe);
      }
      if (auto verdict = decide(i))
        return verdict;
      if (compiled[i][1].memory.placed)
        continue;
      // Depth::Decide stops where placing would be next: what fits is
      // open, and a later prediction resumes here (the same steps, in the
      // same order, as predicting it at once).
      if (decideOnly) {
        decided[c.order] = {std::move(compiled), i};
        return tooBig(largestSoFar, false);
      }
    }
    // Only counted, and the count leaves it open: placed, decided as if
    // they had been placed from the start.
    for (int k = 0; k < 2; ++k) {
      if (!placePosition(compiled[i][k], eff, error))
        return std::nullopt;
      if (pastMemory(compiled[i][k]))
        return tooBig(compiled[i][k].memory.peakBytes, true);
    }
    if (auto verdict = decide(i))
      return verdict;
  }
  // It fits (--exact placed every probe from the start): with Depth::Decide
  // its probes are kept, untimed.
  if (decideOnly) {
    decided[c.order] = {std::move(compiled), probed.size()};
    return tooBig(largestSoFar, false);
  }
  std::vector<PositionCost> all(c.pp);
  for (size_t i = 0; i < probed.size(); ++i) {
    std::array<PositionCost, 2> probe;
    for (int k = 0; k < 2; ++k) {
      std::optional<PositionCost> timed =
          timePosition(compiled[i][k], hw, eff, options, error);
      if (!timed)
        return std::nullopt;
      probe[k] = *std::move(timed);
    }
    for (auto &[p, e] : positionsOf(i, true, probe))
      all[p] = std::move(e);
  }
  return combine(config, all, hw, error);
}

/// Every configuration of `gpus` GPUs the planner tries (see kMaxPipeline).
std::vector<Candidate> candidates(const PlanCommand &command,
                                  const perf::Hardware &hw, int64_t layers,
                                  int64_t batch) {
  std::vector<Candidate> out;
  int64_t n = command.gpus;
  for (int64_t tp = 1; tp <= std::min(n, hw.gpusPerNode); tp *= 2) {
    for (int64_t pp = 1; tp * pp <= n && pp <= kMaxPipeline; pp *= 2) {
      if (n % (tp * pp))
        continue;
      int64_t dp = n / (tp * pp);
      if (batch % dp)
        continue;
      int64_t local = batch / dp;
      std::vector<std::pair<std::string, int64_t>> schedules;
      if (pp == 1)
        schedules.push_back({"", 1});
      else
        for (const char *s : {"1F1B", "Interleaved1F1B"})
          for (int64_t mb : {1, 2})
            if (local % mb == 0 && local / mb >= pp &&
                (std::string(s) == "1F1B" ? pp : 2 * pp) * 2 <= layers)
              schedules.push_back({s, mb});
      for (const auto &[schedule, mb] : schedules) {
        std::vector<std::pair<std::string, bool>> recipes = {{"", false},
                                                             {"tensorwise", false}};
        if (dp > 1)
          recipes.push_back({"tensorwise", true});
        if (tp == 1)
          recipes.push_back({"rowwise", false});
        std::string every = std::to_string(kLayerPolicy);
        std::vector<std::pair<std::string, std::string>> modes = {
            {"none", ""}, {"selective", "gemm"}, {"selective", "op"}};
        if (pp == 1 && layers > kLayerPolicy)
          modes.push_back({"selective", every});
        modes.push_back({"full", ""});
        for (const auto &[fp8, ag] : recipes)
          for (const auto &[ac, policy] : modes)
            out.push_back(Candidate{static_cast<int64_t>(out.size()), dp, tp,
                                    pp, mb, schedule, ac, policy, fp8, ag});
      }
    }
  }
  return out;
}

/// What a part of the search found.
struct Search : Tally {
  std::vector<Evaluated> fit;
  std::optional<Evaluated> smallest; // of those that do not fit
  /// Those predicted within kMemoryMargin above the memory: --exact
  /// compiles them whole too.
  std::vector<Evaluated> nearMisses;

  /// One group's candidates in order, each skipped where a lighter mode
  /// (or a smaller microbatch) of the group already fits, or where full
  /// checkpointing at its microbatch size does not (past the margin --exact
  /// compiles within, with `exact`).
  void group(Planner &planner, const std::vector<Candidate> &candidates,
             double hbmGiB, bool largerMicrobatches, bool exact);
  void merge(Search &&other);
};

std::string firstLine(const std::string &text);

void Search::group(Planner &planner, const std::vector<Candidate> &candidates,
                   double hbmGiB, bool largerMicrobatches, bool exact) {
  // Each candidate predicted once, by its index in the group; nothing
  // where Kiln cannot compile it (counted as such).
  std::map<size_t, std::optional<Evaluated>> done;
  auto evaluate = [&](size_t i) -> const std::optional<Evaluated> & {
    auto [it, fresh] = done.try_emplace(i);
    if (!fresh)
      return it->second;
    const Candidate &c = candidates[i];
    std::string error;
    it->second = planner.evaluate(c, Planner::Depth::Predict, error);
    if (it->second) {
      ++evaluated;
    } else {
      auto &[count, example] = invalid[firstLine(error)];
      if (!count++)
        example = c.meshText() + ", " + c.scheduleText() + ", " + c.acText() +
                  ", " + c.fp8Text();
    }
    return it->second;
  };
  // Full checkpointing keeps the least of every mode (each block's input
  // and what lies outside the blocks, which every mode keeps; the others
  // keep more of each block): where it does not fit, no mode at its
  // microbatch size does, and those are not compiled. Once a mode of a
  // microbatch size does not fit, whether full does is decided before the
  // next is compiled (its probes compiled and placed as its prediction
  // would; timed only if it is predicted after all); where it does not
  // (past the margin --exact compiles within, with `exact`), the rest of
  // that microbatch size is dropped.
  double pastGiB = hbmGiB * (exact ? 1 + kMemoryMargin : 1);
  std::map<int64_t, bool> fullPast; // by microbatch, once decided
  auto pastFullAt = [&](int64_t microbatch) {
    auto [it, fresh] = fullPast.try_emplace(microbatch, false);
    if (!fresh)
      return it->second;
    for (size_t i = 0; i < candidates.size(); ++i) {
      const Candidate &c = candidates[i];
      if (c.ac != "full" || c.microbatch != microbatch)
        continue;
      std::string error;
      std::optional<Evaluated> e =
          planner.evaluate(c, Planner::Depth::Decide, error);
      // Not compilable: counted where the loop comes to it. Where it does
      // not fit, or is compiled whole (no probes), that is its prediction:
      // kept.
      if (e && !e->memoryOnly && done.try_emplace(i, e).second)
        ++evaluated;
      it->second = e && e->p.peakGiB() > pastGiB;
      break;
    }
    return it->second;
  };
  std::vector<const Candidate *> fits;
  std::set<int64_t> pastAt; // microbatch sizes where a mode does not fit
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Candidate &c = candidates[i];
    ++tried;
    if (llvm::any_of(fits, [&](const auto &f) {
          return f->recomputesWithin(c) &&
                 (f->microbatch == c.microbatch ||
                  (!largerMicrobatches && f->microbatch < c.microbatch));
        })) {
      ++dominated;
      continue;
    }
    if (c.ac != "full" && pastAt.count(c.microbatch) &&
        pastFullAt(c.microbatch)) {
      ++tooBig;
      ++pastFull;
      continue;
    }
    const std::optional<Evaluated> &e = evaluate(i);
    if (!e)
      continue;
    if (e->p.peakGiB() > hbmGiB) {
      pastAt.insert(c.microbatch);
      ++tooBig;
      if (!smallest || e->p.peakBytes < smallest->p.peakBytes)
        smallest = e;
      if (!e->exact && e->p.peakGiB() <= hbmGiB * (1 + kMemoryMargin))
        nearMisses.push_back(*e);
      continue;
    }
    fits.push_back(&c);
    fit.push_back(*e);
  }
  planner.dropDecided();
}

void Search::merge(Search &&other) {
  for (Evaluated &e : other.fit)
    fit.push_back(std::move(e));
  for (Evaluated &e : other.nearMisses)
    nearMisses.push_back(std::move(e));
  for (const auto &[why, seen] : other.invalid) {
    auto &[count, example] = invalid[why];
    if (!count)
      example = seen.second;
    count += seen.first;
  }
  tried += other.tried;
  evaluated += other.evaluated;
  tooBig += other.tooBig;
  dominated += other.dominated;
  pastFull += other.pastFull;
  compiles += other.compiles;
  if (other.smallest &&
      (!smallest || other.smallest->p.peakBytes < smallest->p.peakBytes))
    smallest = std::move(other.smallest);
}

std::string firstLine(const std::string &text) {
  std::string line = text.substr(0, text.find('\n'));
  // A diagnostic's location (the override it came from) is noise here.
  if (size_t at = line.find(": error: "); at != std::string::npos)
    line = line.substr(at + 9);
  return line;
}

} // namespace

int kiln::runPlan(const PlanCommand &command) {
  auto started = std::chrono::steady_clock::now();
  auto target = loadPerfTarget(command.hardware, command.efficiency);
  if (!target)
    return 1;
  const perf::Hardware *hw = &target->first;
  const perf::Efficiency *eff = &target->second;
  ModelSession base;
  if (!base.load(command.model, command.overrides))
    return 1;
  int64_t layers = base.config->model.n_layers;
  int64_t seq = command.seqLen ? command.seqLen : base.config->training.seq_len;
  // At least one sequence per GPU by default (local batch 1 under FSDP).
  int64_t batch = command.globalBatch
                      ? command.globalBatch
                      : std::max(base.config->training.global_batch_size,
                                 command.gpus);

  // A bound no search can beat: the f32 weights and AdamW's two moments (12
  // bytes a parameter) are split over the GPUs at best, and every rank
  // holds the profile's reserve besides.
  double parameters = 0;
  for (const ParamSpec &p : modelParameters(*base.config)) {
    double n = 1;
    for (int64_t d : p.shape)
      n *= double(d);
    parameters += n;
  }
  double floorGiB = 12 * parameters / double(command.gpus) /
                        double(int64_t(1) << 30) +
                    eff->reservedGiB;
  if (floorGiB > hw->hbmGiB)
    return commandError(
        "no configuration of " + base.config->sourceName + " on " +
        std::to_string(command.gpus) + " x " + hw->name + " fits in " +
        llvm::formatv("{0:F1}", hw->hbmGiB).str() +
        " GiB: the f32 weights and AdamW's moments alone need " +
        llvm::formatv("{0:F1}", floorGiB).str() +
        " GiB per GPU (with the profile's reserve) however they are "
        "split; more GPUs need less");

  // Dominance: recomputing more adds work and saves only memory, so a
  // checkpointing mode is not tried where a lighter one fits; nor is a
  // microbatch of 2 sequences where one of 1 fits, unless a sequence is
  // shorter than the profile's largest GEMM class (fewer, larger
  // microbatches only enlarge the bubble and what each holds otherwise).
  // The other way, a mode is not compiled where full checkpointing, which
  // keeps the least, does not fit at its microbatch size (Search::group).
  // Candidates that differ only in those two are a group, tried in order;
  // the groups are independent, and each worker thread takes the next.
  bool largerMicrobatches =
      !eff->gemm.empty() && seq < eff->gemm.back().minDim;
  std::vector<std::vector<Candidate>> groups;
  std::map<std::string, size_t> groupOf;
  for (const Candidate &c : candidates(command, *hw, layers, batch)) {
    std::string key = c.meshText() + c.schedule + c.fp8Text();
    auto [it, fresh] = groupOf.try_emplace(key, groups.size());
    if (fresh)
      groups.emplace_back();
    groups[it->second].push_back(c);
  }
  // The groups with the largest probes first: a pipeline mesh compiles
  // each probe at up to three positions, over pp + 2 microbatches (3 pp
  // interleaved), so one taken last would leave the other workers idle.
  // The groups are independent and ties rank by `order`, so the ranking
  // does not depend on which is searched first (as with several workers
  // before; only which example a "does not fit" message names may).
  auto probeWork = [](const Candidate &c) { return c.pp * c.stages(); };
  std::stable_sort(
      groups.begin(), groups.end(),
      [&](const std::vector<Candidate> &a, const std::vector<Candidate> &b) {
        return probeWork(a.front()) > probeWork(b.front());
      });
  std::atomic<size_t> next{0};
  auto work = [&](Search &out) {
    Planner planner(command, *hw, *eff, layers, batch, seq);
    for (size_t g; (g = next++) < groups.size();)
      out.group(planner, groups[g], hw->hbmGiB, largerMicrobatches,
                command.exact);
    out.compiles += planner.compiles;
  };
  int64_t threads = command.threads
                        ? command.threads
                        : std::max(1u, std::thread::hardware_concurrency());
  std::vector<Search> parts(threads);
  std::vector<std::thread> workers;
  for (int64_t t = 1; t < threads; ++t)
    workers.emplace_back(work, std::ref(parts[t]));
  work(parts[0]);
  for (std::thread &w : workers)
    w.join();
  Search all;
  for (Search &part : parts)
    all.merge(std::move(part));
  std::vector<Evaluated> &fit = all.fit;
  const std::optional<Evaluated> &smallest = all.smallest;
  Planner planner(command, *hw, *eff, layers, batch, seq);
  auto faster = [](const Evaluated &a, const Evaluated &b) {
    if (a.p.tokensPerGpu != b.p.tokensPerGpu)
      return a.p.tokensPerGpu > b.p.tokensPerGpu;
    return a.c.order < b.c.order;
  };
  std::sort(fit.begin(), fit.end(), faster);
  if (command.exact) {
    // The finalists (twice as many as shown) compiled whole, among them
    // those the extrapolation may have dropped for memory.
    for (Evaluated &e : all.nearMisses)
      fit.push_back(std::move(e));
    std::sort(fit.begin(), fit.end(), faster);
    std::vector<Evaluated> whole;
    for (size_t i = 0; i < fit.size() && i < size_t(2 * command.top); ++i) {
      std::string error;
      std::optional<Evaluated> e =
          planner.evaluate(fit[i].c, Planner::Depth::Whole, error);
      if (!e || e->p.peakGiB() > hw->hbmGiB)
        continue;
      if (!fit[i].exact)
        e->extrapolated = fit[i].p;
      whole.push_back(*std::move(e));
    }
    std::sort(whole.begin(), whole.end(), faster);
    fit = std::move(whole);
  }
  double seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - started)
                       .count();
  if (fit.empty()) {
    std::string why =
        smallest
            ? "the smallest predicted peak is " +
                  std::string(smallest->p.peakAtLeast ? "at least " : "") +
                  llvm::formatv("{0:F1}", smallest->p.peakGiB()).str() +
                  " GiB per GPU (dp_shard x tp x pp " + smallest->c.meshText() +
                  ", " + smallest->c.acText() + " activation checkpointing, " +
                  smallest->c.fp8Text() + ")"
            : "Kiln cannot compile any configuration of it";
    return commandError(
        "no configuration of " + base.config->sourceName + " on " +
        std::to_string(command.gpus) + " x " + hw->name + " fits in " +
        llvm::formatv("{0:F1}", hw->hbmGiB).str() + " GiB: " + why +
        "; more GPUs, a smaller global batch or a shorter sequence need less");
  }
  fit.resize(std::min<size_t>(fit.size(), command.top));
  all.compiles += planner.compiles;
  printPlan(command, *hw, *eff, base.config->sourceName, batch, seq, all,
            seconds, fit);
  return 0;
}
