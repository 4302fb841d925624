//===- Explain.cpp - `kiln explain --memory`: per-rank bytes of a step ----===//
//
// Everything comes from the compiled plan (the runtime allocates exactly
// its state and arena): persistent state by kind, the train_step arena and
// what is live at its fullest step, and the bytes each collective moves.
//
//===----------------------------------------------------------------------===//

#include "kiln/Compiler/Driver.h"
#include "kiln/Compiler/Session.h"
#include "kiln/Runtime/Plan.h"

#include "llvm/Support/raw_ostream.h"

using namespace kiln;
using namespace kiln::runtime;

namespace {
std::string mib(int64_t bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%10.2f MiB  (%lld bytes)",
                bytes / (1024.0 * 1024.0), static_cast<long long>(bytes));
  return text;
}
} // namespace

int kiln::runExplain(const ExplainCommand &command) {
  if (!command.memory)
    return commandError("kiln explain needs --memory (--fp8 comes with the "
                        "FP8 passes, #5)");
  ModelSession session;
  if (!session.load(command.model, command.overrides) ||
      !session.setRanks(command.worldSize))
    return 1;
  bool hit = false;
  std::optional<Plan> plan = session.cachedRuntimePlan(command.overrides, hit);
  if (!plan)
    return 1;

  int64_t params = 0, moments = 0;
  for (const PlanValue &v : plan->values)
    if (v.kind == PlanValue::State)
      (isOptimizerState(v.name) ? moments : params) += v.bytes();
  const PlanEntry &step = *plan->entry("train_step");
  int64_t gathered = 0, scattered = 0, reduced = 0;
  for (const PlanStep &s : step.steps) {
    if (s.op == "all_gather_start")
      gathered += plan->values[s.results[0]].bytes();
    else if (s.op == "reduce_scatter_start")
      scattered += plan->values[s.operands[0]].bytes();
    else if (s.op == "all_reduce_start")
      reduced += plan->values[s.operands[0]].bytes();
  }

  llvm::raw_ostream &os = llvm::outs();
  os << "kiln explain --memory: " << session.source->name << ", train_step on "
     << plan->ranks << (plan->ranks == 1 ? " rank" : " ranks")
     << " (bytes per rank)\n";
  os << "  parameters (f32 master weights)    " << mib(params) << "\n";
  os << "  optimizer state (AdamW moments)    " << mib(moments) << "\n";
  os << "  step arena (peak, all temporaries) " << mib(step.arenaBytes) << "\n";
  const LiveAtPeak &live = step.liveAtPeak;
  os << "    live at its fullest step " << live.step << ":\n";
  os << "      parameter copies (cast/gathered) " << mib(live.parameterCopies)
     << "\n";
  os << "      gradients                      " << mib(live.gradients) << "\n";
  os << "      activations and temporaries    " << mib(live.activations)
     << "\n";
  os << "  predicted peak (state + arena)     "
     << mib(params + moments + step.arenaBytes) << "\n";
  os << "collectives per step: all-gather " << mib(gathered)
     << " received, reduce-scatter " << mib(scattered) << " sent, all-reduce "
     << reduced << " bytes\n";
  return 0;
}
