//===- Explain.cpp - `kiln explain`: what a compiled step costs -----------===//
//
// --memory: everything from the compiled plan (the runtime allocates
// exactly its state and arena): persistent state by kind, the train_step
// arena and what is live at its fullest step, the bytes each collective
// moves. --fp8: kiln-fp8-linear's decision for every linear of one rank's
// train_step (Fp8Eligibility.h, the function the pass itself calls).
//
//===----------------------------------------------------------------------===//

#include "kiln/Driver/Driver.h"
#include "kiln/Driver/Session.h"
#include "kiln/Runtime/Plan.h"
#include "kiln/Transforms/Fp8Eligibility.h"
#include "kiln/Transforms/Passes.h"

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

namespace {
/// `command`'s model with FP8 on and its all-gather as asked.
bool loadWithFp8(const ExplainCommand &command, bool allGather,
                 ModelSession &session) {
  std::vector<std::string> overrides = command.overrides;
  overrides.push_back("float8.enable=true");
  overrides.push_back(std::string("float8.enable_fsdp_float8_all_gather=") +
                      (allGather ? "true" : "false"));
  return session.load(command.model, overrides) &&
         session.setRanks(command.worldSize);
}

/// Bytes one rank receives per training step, measured on the compiled
/// step (fp8 phase): every all-gather's result, in whatever dtype the group
/// travels, and the FP8 all-gather's all-reduce of weight amaxes.
std::optional<int64_t> gatheredBytes(ModelSession &session) {
  mlir::OwningOpRef<mlir::ModuleOp> module = session.compileThrough("fp8");
  if (!module)
    return std::nullopt;
  auto bytes = [](mlir::Value v) {
    auto type = llvm::cast<mlir::RankedTensorType>(v.getType());
    return type.getNumElements() * type.getElementTypeBitWidth() / 8;
  };
  auto ofWeightAmaxes = [](AllReduceStartOp r) {
    auto flat = r.getInput().getDefiningOp<FlattenOp>();
    return flat && llvm::all_of(flat.getParts(), [](mlir::Value part) {
             return part.getDefiningOp<ShardAmaxOp>() != nullptr;
           });
  };
  int64_t total = 0;
  module->lookupSymbol<mlir::func::FuncOp>(kTrainStepFunc)
      .walk([&](mlir::Operation *op) {
        if (auto g = llvm::dyn_cast<AllGatherStartOp>(op))
          total += bytes(g.getResult());
        else if (auto r = llvm::dyn_cast<AllReduceStartOp>(op);
                 r && ofWeightAmaxes(r))
          total += bytes(r.getResult());
      });
  return total;
}

int explainFp8(ModelSession &session, const ExplainCommand &command) {
  // The decisions kiln-fp8-linear takes, from the options it reads, on the
  // step it rewrites (after the shard phase), FP8 enabled.
  ModelSession enabled;
  if (!loadWithFp8(command, false, enabled))
    return 1;
  mlir::OwningOpRef<mlir::ModuleOp> module = enabled.compileThrough("shard");
  if (!module)
    return 1;
  mlir::FailureOr<std::optional<Fp8Options>> options =
      Fp8Options::fromModule(*module);
  if (mlir::failed(options) || !*options)
    return 1;
  std::vector<Fp8Decision> decisions = decideFp8Linears(
      module->lookupSymbol<mlir::func::FuncOp>(kTrainStepFunc), **options);
  const Float8Config &f8 = session.config->float8;
  int64_t ranks = session.config->parallelism.data_parallel_shard_degree;

  llvm::raw_ostream &os = llvm::outs();
  os << "kiln explain --fp8: " << session.source->name << ", recipe "
     << f8.recipe << ", train_step on " << std::max<int64_t>(ranks, 1)
     << (ranks == 1 ? " rank" : " ranks") << " (M = tokens per rank)";
  if (!f8.enable)
    os << "; float8.enable is false: what enabling it would do";
  os << "\n";
  size_t width = 4;
  for (const Fp8Decision &d : decisions)
    width = std::max(width, d.param.size());
  auto pad = [&](std::string text, size_t n) {
    text.resize(std::max(n, text.size()), ' ');
    return text;
  };
  os << "  " << pad("linear", width) << "  role    " << pad("M x N x K", 24)
     << "dtype  reason\n";
  int64_t fp8Count = 0;
  for (const Fp8Decision &d : decisions) {
    std::string shape = std::to_string(d.m) + " x " + std::to_string(d.n) +
                        " x " + std::to_string(d.k);
    os << "  " << pad(d.param, width) << "  " << pad(stringifyLinearRole(d.role).str(), 8)
       << pad(shape, 24) << (d.fp8 ? "FP8  " : "BF16 ") << "  "
       << (d.fp8 ? std::string("-") : d.reason) << "\n";
    fp8Count += d.fp8;
  }
  os << "FP8 linears: " << fp8Count << " of " << decisions.size() << "\n";

  std::optional<int64_t> without = gatheredBytes(enabled);
  if (!without)
    return 1;
  os << "all-gather per step and rank: " << mib(*without)
     << " received without FP8 all-gather\n";
  if (f8.recipe != "tensorwise") {
    os << "                              (the FP8 all-gather needs recipe "
          "tensorwise)\n";
    return 0;
  }
  ModelSession withAllGather;
  if (!loadWithFp8(command, true, withAllGather))
    return 1;
  std::optional<int64_t> with = gatheredBytes(withAllGather);
  if (!with)
    return 1;
  os << "                              " << mib(*with)
     << " with it (e4m3 weights, one amax all-reduce)\n";
  return 0;
}
} // namespace

int kiln::runExplain(const ExplainCommand &command) {
  if (!command.memory && !command.fp8)
    return commandError("kiln explain needs --memory or --fp8");
  ModelSession session;
  if (!session.load(command.model, command.overrides) ||
      !session.setRanks(command.worldSize))
    return 1;
  if (command.fp8) {
    if (int rc = explainFp8(session, command))
      return rc;
    if (!command.memory)
      return 0;
  }
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
