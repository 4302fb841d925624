//===- ExplainSchedule.cpp - `kiln explain --schedule` --------------------===//
//
// The pipeline schedule of a pipeline-parallel step (docs/pp.md): each pp
// rank's units in the order kiln-pipeline-schedule placed them, timed by
// their cost and drawn as a text timeline, with the bubble fraction that
// timeline has. A unit's cost is the work of its ops in the compiled step
// (each rank compiled through the accumulate phase, where the units are
// marked): GEMM and attention FLOPs, and one per element of everything
// else, with what the rank runs between two units counted in the first;
// a transfer takes no time. The bubble is measured on traces by
// scripts/pp-bubble.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"
#include "kiln/Driver/Driver.h"
#include "kiln/Driver/Session.h"
#include "kiln/Transforms/Passes.h"
#include "kiln/Transforms/PipelineOrder.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace kiln;

namespace {

int64_t numel(Value v) {
  return cast<RankedTensorType>(v.getType()).getNumElements();
}

int64_t dim(Value v, int64_t i) {
  auto t = cast<RankedTensorType>(v.getType());
  return t.getDimSize(i < 0 ? t.getRank() + i : i);
}

/// The work of one op: 2 m n k for a GEMM, the causal half of attention's
/// four S x S x D products per head (its backward two and a half times
/// that), one per result element for everything else.
double opWork(Operation *op) {
  if (auto l = dyn_cast<LinearOp>(op))
    return 2.0 * numel(l.getResult()) * dim(l.getWeight(), 1);
  if (auto l = dyn_cast<LinearGradInputOp>(op))
    return 2.0 * numel(l.getResult()) * dim(l.getWeight(), 0);
  if (auto l = dyn_cast<LinearGradWeightOp>(op))
    return 2.0 * numel(l.getResult()) *
           (numel(l.getInput()) / dim(l.getInput(), -1));
  if (auto m = dyn_cast<ScaledMatmulOp>(op))
    return 2.0 * numel(m.getResult()) * dim(m.getA(), -1);
  auto attention = [](Value q, Value k) {
    // q [B, S, H, D], k [B, S, Hkv, D]: QK^T and PV, causal.
    return 2.0 * numel(q) * dim(k, 1);
  };
  if (auto a = dyn_cast<AttentionOp>(op))
    return attention(a.getQuery(), a.getKey());
  if (auto a = dyn_cast<AttentionGradOp>(op))
    return 2.5 * attention(a->getOperand(0), a->getOperand(1));
  double elements = 0;
  for (Value r : op->getResults())
    elements += numel(r);
  return elements;
}

/// The timeline drawn: one row per rank, `width` characters for the step,
/// each unit its label then dashes, idle time dots.
void draw(const std::vector<std::vector<pipeline::Unit>> &orders,
          const pipeline::Timeline &t, int width, llvm::raw_ostream &os) {
  double scale = width / t.makespan;
  for (size_t r = 0; r < orders.size(); ++r) {
    std::string row(width, '.');
    for (size_t i = 0; i < orders[r].size(); ++i) {
      int from = static_cast<int>(std::lround(t.start[r][i] * scale));
      int to = std::max(from + 1,
                        static_cast<int>(std::lround(t.finish[r][i] * scale)));
      std::string label = pipeline::describe(orders[r][i]);
      for (int c = from; c < std::min(to, width); ++c)
        row[c] = c - from < static_cast<int>(label.size()) && c + 1 < to
                     ? label[c - from]
                     : (c + 1 == to ? '|' : '-');
    }
    os << "  rank " << llvm::format("%-3d", static_cast<int>(r)) << row << "\n";
  }
}
} // namespace

int kiln::explainSchedule(const ExplainCommand &command) {
  ModelSession first;
  if (!first.load(command.model, command.overrides, command.worldSize, 0))
    return 1;
  const Config &config = *first.config;
  MeshShape mesh = config.runMesh();
  if (mesh.pp == 1)
    return commandError(
        "--schedule: the step has no pipeline "
        "(parallelism.pipeline_parallel_degree is 1, or the run has one "
        "rank: pass --world-size N)");
  std::optional<pipeline::Schedule> schedule =
      pipeline::parseSchedule(config.parallelism.pipeline_parallel_schedule);
  pipeline::Shape shape{mesh.pp, config.pipelineStages(),
                        config.microbatches()};
  // Each unit kind's cost, per stage, from every pp position's step.
  pipeline::Durations cost;
  cost.forward.assign(shape.stages, 0);
  cost.backward.assign(shape.stages, 0);
  for (int64_t p = 0; p < mesh.pp; ++p) {
    ModelSession stage;
    if (!stage.loadPipelinePosition(command.model, command.overrides,
                                    command.worldSize, mesh, p))
      return 1;
    OwningOpRef<ModuleOp> module = stage.compileThrough("accumulate");
    if (!module)
      return 1;
    // What runs between a rank's units (adding a microbatch's gradients
    // to the sums) counts with the unit before it, as the rank runs it
    // then; what runs before the first unit or after the last does not.
    std::optional<pipeline::Unit> current;
    double pending = 0;
    for (Operation &op :
         module->lookupSymbol<func::FuncOp>(kTrainStepFunc).getBody().front()) {
      auto label = op.getAttrOfType<StringAttr>(KilnDialect::kUnitAttrName);
      std::optional<pipeline::Unit> unit =
          label ? pipeline::parseUnit(label.str()) : std::nullopt;
      if (!unit) {
        if (current && !isa<WaitOp, func::ReturnOp>(op) &&
            !op.hasTrait<OpTrait::ConstantLike>())
          pending += opWork(&op);
        continue;
      }
      if (current && pending > 0 && !(*unit == *current))
        (current->backward ? cost.backward : cost.forward)[current->stage] +=
            pending / static_cast<double>(shape.microbatches);
      pending = 0;
      current = unit;
      (unit->backward ? cost.backward : cost.forward)[unit->stage] +=
          opWork(&op) / static_cast<double>(shape.microbatches);
    }
  }
  std::vector<std::vector<pipeline::Unit>> orders =
      pipeline::rankOrders(*schedule, shape);
  std::string error;
  std::optional<pipeline::Timeline> timeline =
      pipeline::simulate(orders, shape, cost, error);
  if (!timeline)
    return commandError("internal: " + error);

  llvm::raw_ostream &os = llvm::outs();
  os << "kiln explain --schedule: " << first.source->name << ", "
     << config.parallelism.pipeline_parallel_schedule << " over pp " << mesh.pp
     << " (mesh pp " << mesh.pp << " x dp_shard " << mesh.dpShard << " x tp "
     << mesh.tp << "): " << shape.stages << " stages ("
     << shape.stages / mesh.pp << " per rank; layers per stage";
  for (int64_t s = 0; s < shape.stages; ++s) {
    auto [first, end] = config.stageLayers(s);
    os << (s ? ", " : " ") << end - first;
  }
  os << "), " << shape.microbatches << " microbatches of "
     << config.microbatchRows() << " x " << config.training.seq_len
     << " tokens\n";
  os << "unit cost (GFLOP of its ops, forward / backward):";
  for (int64_t s = 0; s < shape.stages; ++s)
    os << (s ? "," : "") << " s" << s << " "
       << llvm::format("%.3f / %.3f", cost.forward[s] / 1e9,
                       cost.backward[s] / 1e9);
  os << "\n";
  os << "timeline (F<microbatch>s<stage> a forward, B a backward, . idle):\n";
  // The shortest unit gets at least six characters.
  double shortest = timeline->makespan;
  for (size_t r = 0; r < orders.size(); ++r)
    for (size_t i = 0; i < orders[r].size(); ++i)
      shortest =
          std::min(shortest, timeline->finish[r][i] - timeline->start[r][i]);
  int width = static_cast<int>(
      std::min(400.0, std::ceil(6 * timeline->makespan / shortest)));
  draw(orders, *timeline, std::max(width, 40), os);
  os << "bubble fraction: " << llvm::format("%.3f", timeline->bubble)
     << " (idle rank-time over ranks x the schedule's time, transfers "
        "taking none)\n";
  os << "parameters: each stage's gathered once per step and kept across "
        "its microbatches (FSDP does not reshard after the forward under "
        "pp)\n";
  return 0;
}
