//===- Session.h - A model loaded for a command -----------------*- C++ -*-===//

#ifndef KILN_DRIVER_SESSION_H
#define KILN_DRIVER_SESSION_H

#include "kiln/Compiler/Pipeline.h"
#include "kiln/Frontend/Config.h"
#include "kiln/Frontend/ConfigParser.h"
#include "kiln/Runtime/Plan.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/SourceMgr.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

/// Prints `error: <message>` to stderr (a message that starts with
/// `FILE:LINE:COL: error: ` as it is) and returns 1, the exit code of a
/// command that failed on bad input.
int commandError(const llvm::Twine &message);

/// Everything a command needs to read a model: a context whose diagnostics
/// print `file:line:col: error: ...` with the offending source line.
struct ModelSession {
  mlir::MLIRContext context;
  llvm::SourceMgr sourceMgr;
  std::unique_ptr<mlir::SourceMgrDiagnosticHandler> handler;
  std::optional<ModelSource> source;
  std::optional<Config> config;
  /// Set before load(): diagnostics are not printed, and the first one is
  /// kept here (kiln plan tries configurations that may not exist).
  bool quiet = false;
  std::string firstError;
  /// Set before compiling: the plan holds train_step and eval_loss only.
  bool stepOnly = false;
  /// Cleared before compiling: the module is verified once, after the last
  /// pass, instead of after every pass (a fifth of a compile; kiln plan's
  /// probes).
  bool verifyEachPass = true;
  /// Cleared before compiling: the buffers are counted, not placed
  /// (PipelineOptions::placeBuffers; kiln plan's probes, placed with
  /// kiln::placeBuffers only where the count does not settle what fits).
  bool placeBuffers = true;

  /// Loads and validates; prints what went wrong and returns false if not.
  /// With the run's `worldSize`, also decides the mesh for it
  /// (Config::mesh; parseConfig): a mesh that does not fit the run, or a
  /// global batch that does not split over its dp_shard ranks, is an error
  /// at the key it names.
  /// With the `worldRank` too (kiln train), the compile is for that rank's
  /// position on the tp axis (Config::tpPosition).
  bool load(const std::string &model, const std::vector<std::string> &overrides,
            std::optional<int64_t> worldSize = std::nullopt,
            std::optional<int64_t> worldRank = std::nullopt);
  /// load() for the first rank of pipeline position `p` of `mesh` (every
  /// rank of a position compiles the same stages; explain's reports take
  /// one plan per position).
  bool loadPipelinePosition(const std::string &model,
                            const std::vector<std::string> &overrides,
                            int64_t worldSize, const MeshShape &mesh,
                            int64_t p) {
    return load(model, overrides, worldSize, p * mesh.dpShard * mesh.tp);
  }

  /// Runs every built phase (with `fuse` false, all but the fuse phase) and
  /// returns the plan as JSON text, or nothing after printing the
  /// diagnostics.
  std::optional<std::string> compilePlan(bool fuse = true);

  /// The module after the built phases up to and including `phase` (with
  /// `fuse` false, not the fuse phase), or null after printing the
  /// diagnostics.
  mlir::OwningOpRef<mlir::ModuleOp> compileThrough(llvm::StringRef phase,
                                                   bool fuse = true);

private:
  /// The load-time refusal of what tensor and pipeline parallel do not
  /// build yet.
  bool refuseUnbuilt();

public:
  /// compilePlan's result, as the runtime reads it, from the on-disk cache
  /// ($KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln or ~/.cache/kiln), keyed
  /// by the model text, the `overrides` it was loaded with, the mesh it is
  /// compiled for and this build; compiled and stored there when missing.
  /// An entry that does not load is discarded with a warning naming it and
  /// compiled again; a cache that cannot be written only costs time. `hit`
  /// says which; nothing after printing what went wrong.
  std::optional<runtime::Plan>
  cachedRuntimePlan(const std::vector<std::string> &overrides, bool &hit);
};

} // namespace kiln

#endif // KILN_DRIVER_SESSION_H
