//===- PlanReport.cpp - `kiln plan`'s report ------------------------------===//
//
// The configurations the search ranked (PlanSearch.cpp), as a table with
// each one's reasons or, with --json, as one object (docs/perf-model.md,
// "The planner").
//
//===----------------------------------------------------------------------===//

#include "PlanSearch.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

using namespace kiln;
using namespace kiln::plansearch;

void kiln::plansearch::printPlan(const PlanCommand &command,
                                 const perf::Hardware &hw,
                                 const perf::Efficiency &eff,
                                 const std::string &model, int64_t batch,
                                 int64_t seq, const Tally &all, double seconds,
                                 const std::vector<Evaluated> &fit) {

  llvm::raw_ostream &os = llvm::outs();
  if (command.json) {
    llvm::json::Array top;
    for (const Evaluated &e : fit) {
      llvm::json::Object row{{"mesh", llvm::json::Object{{"pp", e.c.pp},
                                                         {"dp_shard", e.c.dp},
                                                         {"tp", e.c.tp}}},
                             {"schedule", e.c.schedule},
                             {"microbatch_size", e.c.microbatch},
                             {"activation_checkpoint", e.c.ac},
                             {"selective_ac_option", e.c.policy},
                             {"float8", e.c.fp8},
                             {"fp8_all_gather", e.c.fp8AllGather},
                             {"step_time_s", e.p.step},
                             {"tokens_per_s_per_gpu", e.p.tokensPerGpu},
                             {"mfu", e.p.mfu},
                             {"peak_memory_gib", e.p.peakGiB()},
                             {"exposed_comm_s", e.p.exposed},
                             {"bubble", e.p.bubble},
                             {"exact", e.exact},
                             {"may_not_fit", e.mayNotFit(hw.hbmGiB)},
                             {"overrides", llvm::json::Array(e.overrides)}};
      if (e.extrapolated)
        row["extrapolated"] =
            llvm::json::Object{{"step_time_s", e.extrapolated->step},
                               {"peak_memory_gib", e.extrapolated->peakGiB()},
                               {"exposed_comm_s", e.extrapolated->exposed}};
      top.push_back(std::move(row));
    }
    llvm::json::Object rejected;
    for (const auto &[why, seen] : all.invalid)
      rejected[why] =
          llvm::json::Object{{"count", seen.first}, {"first", seen.second}};
    llvm::json::Object out{{"model", model},
                           {"hardware", hw.name},
                           {"hbm_gib", hw.hbmGiB},
                           {"gpus", command.gpus},
                           {"global_batch_size", batch},
                           {"seq_len", seq},
                           {"configurations", all.tried},
                           {"evaluated", all.evaluated},
                           {"do_not_fit", all.tooBig},
                           {"do_not_fit_past_full", all.pastFull},
                           {"dominated", all.dominated},
                           {"not_compilable", std::move(rejected)},
                           {"compiles", all.compiles},
                           {"seconds", seconds},
                           {"top", std::move(top)}};
    os << llvm::formatv("{0:2}", llvm::json::Value(std::move(out))) << "\n";
    return;
  }
  int64_t notCompilable = 0;
  for (const auto &[why, seen] : all.invalid)
    notCompilable += seen.first;
  os << "kiln plan: " << model << " on " << command.gpus << " x " << hw.name
     << ", global batch " << batch << " x seq " << seq << ", efficiency "
     << eff.name << "\n";
  os << llvm::format("searched %lld configurations in %.1f s (%lld compiles): "
                     "%lld predicted, %lld do not fit in %.1f GiB (%lld "
                     "lighter modes not compiled: full checkpointing does "
                     "not fit), %lld skipped (a lighter one fits), %lld not "
                     "compilable\n",
                     (long long)all.tried, seconds, (long long)all.compiles,
                     (long long)all.evaluated, (long long)all.tooBig, hw.hbmGiB,
                     (long long)all.pastFull, (long long)all.dominated,
                     (long long)notCompilable);
  for (const auto &[why, seen] : all.invalid)
    os << "  not compilable (" << seen.first << ", the first " << seen.second
       << "): " << why << "\n";
  os << "  #  dp_shard x tp x pp  schedule                 AC              FP8"
        "                 tokens/s/GPU   MFU  peak GiB  exposed s  bubble\n";
  for (size_t i = 0; i < fit.size(); ++i) {
    const Evaluated &e = fit[i];
    os << llvm::format("%3zu  %-19s %-24s %-15s %-20s %12.1f %5.1f%% %9.1f "
                       "%10.3f %6.1f%%%s\n",
                       i + 1, e.c.meshText().c_str(),
                       e.c.scheduleText().c_str(), e.c.acText().c_str(),
                       e.c.fp8Text().c_str(), e.p.tokensPerGpu, 100 * e.p.mfu,
                       e.p.peakGiB(), e.p.exposed, 100 * e.p.bubble,
                       e.exact ? "" : "  (extrapolated)");
    if (e.mayNotFit(hw.hbmGiB))
      os << llvm::format("     may not fit: within %.0f%% of the memory, the "
                         "extrapolation's error; --exact compiles it whole\n",
                         100 * kMemoryLow);
    os << llvm::format("     why: %.1f GiB of HBM to spare; communication "
                       "exposed %.1f%% of the step; ",
                       hw.hbmGiB - e.p.peakGiB(), 100 * e.p.exposed / e.p.step);
    if (e.c.pp > 1)
      os << llvm::format("pipeline bubble %.1f%%", 100 * e.p.bubble);
    else
      os << "no pipeline bubble";
    if (i > 0)
      os << llvm::format("; %.1f%% below #1",
                         100 * (1 - e.p.tokensPerGpu / fit[0].p.tokensPerGpu));
    os << "\n";
  }
  os << "#1 as flags: --gpus " << command.gpus;
  for (size_t i = command.overrides.size(); i < fit[0].overrides.size(); ++i)
    os << " --set '" << fit[0].overrides[i] << "'";
  os << "\n";
}
