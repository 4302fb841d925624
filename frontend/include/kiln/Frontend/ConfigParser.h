//===- ConfigParser.h - Model files and presets to a Config -----*- C++ -*-===//

#ifndef KILN_FRONTEND_CONFIGPARSER_H
#define KILN_FRONTEND_CONFIGPARSER_H

#include "kiln/Frontend/Config.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/LLVM.h"

#include <optional>
#include <string>

namespace kiln {

/// The text of a model description and the name diagnostics use for it.
struct ModelSource {
  std::string name; // a path, or a preset's name
  std::string text;
  bool isPreset = false;
};

/// Resolves the MODEL argument of the tools: an existing file, else a
/// built-in preset. On failure returns nothing and sets `error` to a
/// one-line message (missing file, unreadable file, unknown preset with the
/// nearest one suggested).
std::optional<ModelSource> loadModelSource(llvm::StringRef arg,
                                           std::string &error);

/// Parses and validates a model description plus `--set section.key=value`
/// overrides. Every problem is emitted as an MLIR diagnostic at a
/// FileLineColLoc into the source (or into the override); returns failure if
/// there was any. With the run's `worldSize` (`--world-size`, or the ranks
/// mpirun started), the mesh is resolved for it into Config::mesh, and a
/// mesh that does not fit the run is one of the problems (Mesh.h).
mlir::FailureOr<Config>
parseConfig(mlir::MLIRContext *context, const ModelSource &source,
            llvm::ArrayRef<std::string> overrides = {},
            std::optional<int64_t> worldSize = std::nullopt);

/// The location of `key` ("section.key") in the source, falling back to the
/// first of `fallbacks` that was written, then to the section header, then
/// to the start of the file.
mlir::Location keyLocation(mlir::MLIRContext *context, const Config &config,
                           llvm::StringRef key,
                           llvm::ArrayRef<llvm::StringRef> fallbacks = {});

/// Renders every key with its effective value as TOML.
std::string renderConfigToml(const Config &config);

} // namespace kiln

#endif // KILN_FRONTEND_CONFIGPARSER_H
