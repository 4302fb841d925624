//===- TpOracle.cpp - Tensor parallel's step against one rank's, in fp64 --===//
//
// Run under `mpirun -np T`: each MPI rank is position r of a tp = T mesh
// (dp_shard 1). It compiles the tiny model's step for its position (as
// `kiln train` does: the session's tp position goes into `kiln.tp`), loads
// its slices of one set of whole weights, runs
// `loss_and_grads` on the CPU backend (fp32 policy) with its token shard,
// and compares with the LibTorch oracle (float64, one rank, the whole
// weights and batch):
//
// - the loss, on every rank;
// - each tp-sharded parameter's gradient against its slice of the
//   reference's;
// - each tp-replicated parameter's gradient (the norms), which
//   kiln-tp-grad-sync has summed over tp in the step, against the
//   reference's whole gradient on every rank;
// - then `train_step`'s grad_norm (the norm AdamW clips with, of the same
//   gradients: the step reads the weights before it updates them) against
//   the reference's norm of all its gradients.
//
// Prints the worst relative errors (norm-wise per tensor) and fails above
// the bound given as argv[1]. With `loss-parallel` as argv[2] the step is
// compiled with loss parallel (the cross-entropy on vocabulary-sharded
// logits, docs/tp.md "The ends"), else with disable_loss_parallel; argv[3],
// if given, is the vocabulary (64 by default; one tp does not divide is
// padded: the padding rows load as 0 and must get a zero gradient).
//
//===----------------------------------------------------------------------===//

#include "TorchLlama.h"

#include "kiln/Compiler/Pipeline.h"
#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Driver/Session.h"
#include "kiln/Frontend/ModelImporter.h"
#include "kiln/Plan/PlanEmitter.h"
#include "kiln/Runtime/Comm/MpiCommunicator.h"
#include "kiln/Runtime/Cpu/CpuExecutor.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

using namespace kiln;
using namespace kiln::runtime;

namespace {
struct Param {
  std::string name;
  std::vector<int64_t> local; // the rank's shape
  int64_t shardDim = -1;      // -1: replicated over tp
  int64_t pad = 0;            // padding entries at the end of shardDim
};

/// A deterministic value in [-1, 1) from (name, index): the same whole
/// tensor on every rank.
double pseudoRandom(const std::string &name, int64_t i) {
  uint64_t h = 1469598103934665603ull;
  for (char c : name)
    h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  h ^= static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return static_cast<double>(h >> 11) / static_cast<double>(1ull << 52) - 1.0;
}

/// Row-major index of element `local` of shard `index` in the whole tensor,
/// or -1 for padding.
int64_t wholeIndex(const Param &p, int64_t tp, int64_t index, int64_t flat) {
  if (p.shardDim < 0)
    return flat;
  // Split `flat` into coordinates of the local shape, shift the sharded
  // coordinate, rejoin in the whole shape.
  std::vector<int64_t> coord(p.local.size());
  for (int64_t d = static_cast<int64_t>(p.local.size()) - 1; d >= 0; --d) {
    coord[d] = flat % p.local[d];
    flat /= p.local[d];
  }
  coord[p.shardDim] += index * p.local[p.shardDim];
  int64_t out = 0;
  for (size_t d = 0; d < p.local.size(); ++d) {
    bool sharded = static_cast<int64_t>(d) == p.shardDim;
    int64_t size = sharded ? p.local[d] * tp - p.pad : p.local[d];
    if (coord[d] >= size)
      return -1;
    out = out * size + coord[d];
  }
  return out;
}

int64_t numel(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t s : shape)
    n *= s;
  return n;
}

double relError(const std::vector<double> &got,
                const std::vector<double> &ref) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff += (got[i] - ref[i]) * (got[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(diff / norm);
}
} // namespace

int main(int argc, char **argv) {
  double bound = argc > 1 ? std::atof(argv[1]) : 1e-5;
  bool lossParallel = argc > 2 && std::string(argv[2]) == "loss-parallel";
  const int64_t vocab = argc > 3 ? std::atoll(argv[3]) : 64;
  Expected<std::unique_ptr<comm::Communicator>> created =
      comm::createMpiCommunicator();
  if (!created) {
    std::fprintf(stderr, "error: %s\n", created.error().message().c_str());
    return 1;
  }
  comm::Communicator &comm = **created;
  const int64_t tp = comm.size(), rank = comm.rank();
  const int64_t batch = 2, seq = 16;
  std::vector<std::string> sets = {
      "parallelism.tensor_parallel_degree=" + std::to_string(tp),
      std::string("parallelism.disable_loss_parallel=") +
          (lossParallel ? "false" : "true"),
      "mixed_precision.param=float32",
      "training.global_batch_size=" + std::to_string(batch),
      "training.seq_len=" + std::to_string(seq),
      "model.n_layers=2",
      "model.vocab_size=" + std::to_string(vocab),
      // GQA (2 query heads per kv head) where tp divides the 2 kv heads.
      "model.n_kv_heads=" + std::string(tp <= 2 ? "2" : "4"),
  };

  // Compiled for this rank's tp position, as kiln train compiles it.
  ModelSession session;
  if (!session.load(KILN_SOURCE_DIR "/examples/tiny.toml", sets, tp, rank))
    return 1;
  mlir::OwningOpRef<mlir::ModuleOp> module =
      importModel(&session.context, *session.config);
  if (!module)
    return 1;

  // Through tp, read the parameters' shards, then the rest.
  auto none = [](unsigned, const PhaseInfo &) { return mlir::success(); };
  auto configure = [](mlir::PassManager &) { return mlir::success(); };
  if (failed(runPipeline(*module, *findPhase("tp"), none, configure)))
    return 1;
  std::vector<Param> params;
  auto forward = module->lookupSymbol<mlir::func::FuncOp>("forward_loss");
  for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
    auto name = forward.getArgAttrOfType<mlir::StringAttr>(
        i, KilnDialect::kParamAttrName);
    if (!name)
      continue;
    Param p;
    p.name = name.getValue().str();
    auto type =
        mlir::cast<mlir::RankedTensorType>(forward.getArgument(i).getType());
    p.local.assign(type.getShape().begin(), type.getShape().end());
    if (auto shard = forward.getArgAttrOfType<TpShardAttr>(
            i, KilnDialect::kTpShardAttrName)) {
      p.shardDim = shard.getDim();
      p.pad = shard.getPad();
    }
    params.push_back(p);
  }
  bool pastTp = false;
  auto skipDone = [&](const PhaseInfo &phase) {
    bool skip = !pastTp;
    if (llvm::StringRef(phase.name) == "tp")
      pastTp = true;
    return skip;
  };
  if (failed(
          runPipeline(*module, *findPhase("plan"), none, configure, skipDone)))
    return 1;
  mlir::FailureOr<std::string> text = emitPlan(*module);
  if (failed(text))
    return 1;
  Expected<Plan> plan = parsePlan(*text);
  if (!plan) {
    std::fprintf(stderr, "error: %s\n", plan.error().message().c_str());
    return 1;
  }
  Expected<std::unique_ptr<CpuExecutor>> exec = CpuExecutor::create(*plan);
  if (!exec) {
    std::fprintf(stderr, "error: %s\n", exec.error().message().c_str());
    return 1;
  }
  if (Error e = (*exec)->setCommunicator(&comm)) {
    std::fprintf(stderr, "error: %s\n", e.message().c_str());
    return 1;
  }
  if (Error e = (*exec)->initialize(1)) {
    std::fprintf(stderr, "error: %s\n", e.message().c_str());
    return 1;
  }

  // One set of whole weights (norms near 1), each rank's slices loaded.
  oracle::Tensors whole;
  for (const Param &p : params) {
    bool norm = p.local.size() == 1;
    double scale = norm ? 0.1 : 0.05;
    std::vector<double> &w = whole[p.name];
    int64_t n = numel(p.local) * (p.shardDim < 0 ? 1 : tp);
    if (p.shardDim >= 0)
      n -= p.pad * numel(p.local) / p.local[p.shardDim];
    w.resize(n);
    for (int64_t i = 0; i < n; ++i)
      w[i] = (norm ? 1.0 : 0.0) + scale * pseudoRandom(p.name, i);
    std::vector<float> *state = (*exec)->state(p.name);
    if (!state || static_cast<int64_t>(state->size()) != numel(p.local)) {
      std::fprintf(stderr, "error: no state '%s' of the local size\n",
                   p.name.c_str());
      return 1;
    }
    for (int64_t i = 0; i < numel(p.local); ++i) {
      int64_t at = wholeIndex(p, tp, rank, i);
      (*state)[i] = at < 0 ? 0.0f : static_cast<float>(w[at]);
    }
  }
  std::vector<int32_t> tokens(batch * seq), targets(batch * seq);
  for (int64_t i = 0; i < batch * seq; ++i) {
    tokens[i] = static_cast<int32_t>((pseudoRandom("tokens", i) + 1) * 0.5 *
                                     static_cast<double>(vocab));
    targets[i] = static_cast<int32_t>((pseudoRandom("targets", i) + 1) * 0.5 *
                                      static_cast<double>(vocab));
  }
  // The rank's sequence shard of both (#kiln.tp_shard<dim = 1>).
  std::vector<int32_t> shard, shardTargets;
  for (int64_t bi = 0; bi < batch; ++bi)
    for (int64_t s = rank * seq / tp; s < (rank + 1) * seq / tp; ++s) {
      shard.push_back(tokens[bi * seq + s]);
      shardTargets.push_back(targets[bi * seq + s]);
    }

  Expected<EntryOutputs> out =
      (*exec)->run("loss_and_grads", shard, shardTargets, 1);
  if (!out) {
    std::fprintf(stderr, "error: %s\n", out.error().message().c_str());
    return 1;
  }

  const ModelConfig &m = session.config->model;
  oracle::LlamaShape shape{m.dim,       m.n_layers,   m.n_heads,
                           m.kvHeads(), m.vocab_size, m.ffnHiddenDim(),
                           m.norm_eps,  m.rope_theta, m.tie_embeddings};
  oracle::LossAndGrads ref = oracle::lossAndGrads(
      shape, whole, tokens, targets, batch, seq, oracle::Precision::Float64);

  double lossError = std::fabs(out->at("loss")[0] - ref.loss) / ref.loss;
  double worstSharded = 0, worstReplicated = 0;
  std::string shardedName, replicatedName;
  for (const Param &p : params) {
    std::vector<float> &g = out->at("grad:" + p.name);
    const std::vector<double> &r = ref.grads.at(p.name);
    std::vector<double> got(g.begin(), g.end()), want = r;
    if (p.shardDim >= 0) {
      want.clear();
      for (int64_t i = 0; i < numel(p.local); ++i) {
        int64_t at = wholeIndex(p, tp, rank, i);
        want.push_back(at < 0 ? 0.0 : r[at]);
      }
    }
    double e = relError(got, want);
    double &worst = p.shardDim >= 0 ? worstSharded : worstReplicated;
    if (e > worst) {
      worst = e;
      (p.shardDim >= 0 ? shardedName : replicatedName) = p.name;
    }
  }

  // The clipping norm of train_step (step 1), from the same weights.
  Expected<EntryOutputs> step =
      (*exec)->run("train_step", shard, shardTargets, 1);
  if (!step) {
    std::fprintf(stderr, "error: %s\n", step.error().message().c_str());
    return 1;
  }
  double refNorm = 0;
  for (const auto &[name, r] : ref.grads)
    for (double v : r)
      refNorm += v * v;
  refNorm = std::sqrt(refNorm);
  double normError = std::fabs(step->at("grad_norm")[0] - refNorm) / refNorm;

  std::printf("rank %lld of tp %lld%s: loss %.9g (reference %.9g), relative "
              "error %.3g; worst gradient errors: sharded %.3g (%s), "
              "replicated %.3g (%s); grad_norm %.9g (reference %.9g), "
              "relative error %.3g\n",
              static_cast<long long>(rank), static_cast<long long>(tp),
              lossParallel ? " (loss parallel)" : "", out->at("loss")[0],
              ref.loss, lossError, worstSharded, shardedName.c_str(),
              worstReplicated, replicatedName.c_str(), step->at("grad_norm")[0],
              refNorm, normError);
  bool ok = lossError <= bound && worstSharded <= bound &&
            worstReplicated <= bound && normError <= bound;
  if (!ok)
    std::printf("rank %lld: FAILED: above the bound %g\n",
                static_cast<long long>(rank), bound);
  return ok ? 0 : 1;
}
