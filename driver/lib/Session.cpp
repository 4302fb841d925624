//===- Session.cpp - A model loaded for a command -------------------------===//

#include "kiln/Driver/Session.h"
#include "kiln/Compiler/Pipeline.h"
#include "kiln/Frontend/ModelImporter.h"
#include "kiln/Plan/PlanEmitter.h"
#include "kiln/Runtime/Cache.h"
#include "kiln/Runtime/Support/Files.h"
#include "kiln/Runtime/Support/AtomicFile.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "mlir/IR/Verifier.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <unistd.h>

#ifndef KILN_GIT_HASH
#define KILN_GIT_HASH "unknown"
#endif

using namespace mlir;
using namespace kiln;

int kiln::commandError(const llvm::Twine &message) {
  std::string text = message.str();
  // FILE:LINE:COL: error: ... names its place already.
  size_t at = text.find(": error: ");
  size_t col = at == std::string::npos ? at : text.rfind(':', at - 1);
  size_t line = col == std::string::npos || col == 0 ? std::string::npos
                                                     : text.rfind(':', col - 1);
  auto digits = [&](size_t from, size_t to) {
    return to > from && text.find_first_not_of("0123456789", from) == to;
  };
  bool located =
      line != std::string::npos && digits(line + 1, col) && digits(col + 1, at);
  llvm::errs() << (located ? "" : "error: ") << text << "\n";
  return 1;
}

bool ModelSession::load(const std::string &model,
                        const std::vector<std::string> &overrides,
                        std::optional<int64_t> worldSize,
                        std::optional<int64_t> worldRank) {
  std::string error;
  source = loadModelSource(model, error);
  if (!source) {
    if (quiet)
      firstError = error;
    else
      llvm::errs() << error << "\n";
    return false;
  }
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(source->text, source->name),
      llvm::SMLoc());
  // kiln plan compiles small modules, one per thread: MLIR's own threads
  // would only add their start.
  if (quiet) {
    context.disableMultithreading();
    context.getDiagEngine().registerHandler([this](Diagnostic &d) {
      if (d.getSeverity() == DiagnosticSeverity::Error && firstError.empty())
        firstError = d.str();
      return success();
    });
  } else {
    handler =
        std::make_unique<SourceMgrDiagnosticHandler>(sourceMgr, &context);
  }
  FailureOr<Config> parsed =
      parseConfig(&context, *source, overrides, worldSize);
  if (failed(parsed))
    return false;
  config = std::move(*parsed);
  if (worldRank) {
    config->tpPosition = config->runMesh().tpIndex(*worldRank);
    config->ppPosition = config->runMesh().ppIndex(*worldRank);
  }
  return refuseUnbuilt();
}

bool ModelSession::refuseUnbuilt() {
  const ParallelismConfig &p = config->parallelism;
  if (p.pipeline_parallel_degree > 1 && config->model.tie_embeddings) {
    emitError(keyLocation(&context, *config, "model.tie_embeddings",
                          {"parallelism.pipeline_parallel_degree"}))
        << "model.tie_embeddings with parallelism.pipeline_parallel_degree ("
        << p.pipeline_parallel_degree
        << ") is not implemented yet: the table would be on the first stage "
           "for the embedding and on the last for the output projection, "
           "its two gradients summed across them (#18, docs/pp.md)";
    return false;
  }
  if (p.tensor_parallel_degree == 1)
    return true;
  // An error at the tp key: "parallelism.tensor_parallel_degree (N) <why>".
  auto refuseTp = [&](llvm::StringRef why) {
    emitError(
        keyLocation(&context, *config, "parallelism.tensor_parallel_degree"))
        << "parallelism.tensor_parallel_degree (" << p.tensor_parallel_degree
        << ") " << why;
    return false;
  };
  if (config->float8.enable && config->float8.recipe == "rowwise")
    return refuseTp("with float8.recipe = \"rowwise\" is not implemented "
                    "yet: a row's scale would span the columns tp splits "
                    "(o, w2), so each row's amax needs an all-reduce over tp "
                    "(#17, docs/tp.md); tensorwise and delayed work");
  if (config->float8.enable && p.enable_async_tensor_parallel)
    return refuseTp("with float8.enable and "
                    "parallelism.enable_async_tensor_parallel is not "
                    "implemented yet: kiln-fp8-linear pairs one FP8 linear "
                    "per weight with its backward, and async TP splits each "
                    "into chunks (#17, docs/tp.md)");
  if (config->model.tie_embeddings) {
    emitError(keyLocation(&context, *config, "model.tie_embeddings",
                          {"parallelism.tensor_parallel_degree"}))
        << "model.tie_embeddings with parallelism.tensor_parallel_degree ("
        << p.tensor_parallel_degree
        << ") is not implemented yet: the embedding and the output "
           "projection would share one table sharded over the vocabulary, "
           "and one weight read by two ops is not partitioned (#17, "
           "docs/tp.md)";
    return false;
  }
  return true;
}

OwningOpRef<ModuleOp> ModelSession::compileThrough(llvm::StringRef phase,
                                                   bool fuse) {
  OwningOpRef<ModuleOp> module = importModel(&context, *config);
  if (!module || failed(verify(*module)))
    return nullptr;
  // The planner's compiles need @train_step only (and @forward_loss, which
  // every plan has): the gradients' and logits' entries go after the train
  // phase, a third of the work.
  auto none = [&](unsigned, const PhaseInfo &p) {
    if (stepOnly && llvm::StringRef(p.name) == "train")
      for (llvm::StringRef name : {kLossAndGradsFunc, kForwardLogitsFunc})
        if (auto f = module->lookupSymbol<func::FuncOp>(name))
          f.erase();
    return success();
  };
  auto configure = [&](PassManager &pm) {
    pm.enableVerifier(verifyEachPass);
    return success();
  };
  auto skip = [&](const PhaseInfo &p) {
    return !fuse && llvm::StringRef(p.name) == "fuse";
  };
  PipelineOptions options;
  options.placeBuffers = placeBuffers;
  if (failed(runPipeline(*module, *findPhase(phase), none, configure, skip,
                         options)) ||
      (!verifyEachPass && failed(verify(*module))))
    return nullptr;
  return module;
}

std::optional<std::string> ModelSession::compilePlan(bool fuse) {
  OwningOpRef<ModuleOp> module = compileThrough("plan", fuse);
  if (!module)
    return std::nullopt;
  FailureOr<std::string> text = emitPlan(*module);
  if (failed(text))
    return std::nullopt;
  return std::move(*text);
}

namespace {
using kiln::runtime::fnv1a;

/// This build of the compiler: its git hash (taken when CMake configured
/// the build) and the size and time of the running executable (so a
/// rebuild without reconfiguring never reuses another build's plans).
std::string buildIdentity() {
  std::string id = KILN_GIT_HASH;
  llvm::sys::fs::file_status status;
  if (!llvm::sys::fs::status("/proc/self/exe", status))
    id += " " + std::to_string(status.getSize()) + " " +
          std::to_string(status.getLastModificationTime()
                             .time_since_epoch()
                             .count());
  return id;
}
} // namespace

std::optional<runtime::Plan>
ModelSession::cachedRuntimePlan(const std::vector<std::string> &overrides,
                                bool &hit) {
  std::string key = source->text;
  for (const std::string &o : overrides)
    key += "\n--set " + o;
  MeshShape mesh = config->runMesh();
  key += "\nmesh " + std::to_string(mesh.pp) + " " +
         std::to_string(mesh.dpShard) + " " + std::to_string(mesh.tp) +
         " tp position " + std::to_string(config->tpPosition) +
         " pp position " + std::to_string(config->ppPosition);
  key += "\n" + buildIdentity() + "\nplan " + std::to_string(plan::kVersion);
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.kplan",
                static_cast<unsigned long long>(fnv1a(key)));
  std::string dir = runtime::kilnCacheDir(), path = dir + "/" + name;
  hit = false;
  // A cache entry is input like any other: one that does not load (cut
  // short by a full disk, corrupted, not a regular file) is discarded and
  // compiled again, never a lasting failure.
  if (llvm::sys::fs::exists(path)) {
    runtime::Expected<std::string> text =
        runtime::readRegularFile(path, int64_t(1) << 30, "cached plan");
    runtime::Error error = text.takeError();
    if (text) {
      runtime::Expected<runtime::Plan> plan = runtime::parsePlan(*text);
      if (plan) {
        hit = true;
        return *std::move(plan);
      }
      error = plan.takeError();
    }
    llvm::errs() << "warning: discarding the cached plan '" << path << "' ("
                 << error.message() << "); compiling the model again\n";
    if (runtime::fileKind(path) == "a regular file")
      llvm::sys::fs::remove(path);
  }
  std::optional<std::string> text = compilePlan();
  if (!text)
    return std::nullopt;
  runtime::Expected<runtime::Plan> loaded = runtime::parsePlan(*text);
  if (!loaded) {
    commandError("internal: the compiled plan does not load: " +
                 loaded.error().message());
    return std::nullopt;
  }
  std::optional<runtime::Plan> plan = *std::move(loaded);
  // A cache that cannot be written only costs time; every write, flush and
  // close is checked, and the entry appears whole or not at all.
  runtime::Error failure;
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    failure = runtime::Error("cannot create '" + dir + "': " + ec.message());
  else if (!llvm::sys::fs::exists(path))
    failure = runtime::writeFileAtomically(path, *text);
  if (failure)
    llvm::errs() << "warning: the plan is not cached: " << failure.message()
                 << "\n";
  return plan;
}
