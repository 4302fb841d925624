//===- ConfigParserImpl.h - The model-file parser, inside the frontend ----===//
//
// The parser's state, shared by its two halves: ConfigParser.cpp reads the
// TOML key by key, ConfigValidate.cpp checks what spans several keys. Not
// installed: the frontend's interface is kiln/Frontend/ConfigParser.h.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_FRONTEND_CONFIGPARSERIMPL_H
#define KILN_FRONTEND_CONFIGPARSERIMPL_H

#include "kiln/Frontend/Config.h"
#include "kiln/Frontend/ConfigParser.h"
#include "kiln/Frontend/ConfigSchema.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/MLIRContext.h"

#include <toml++/toml.h>

#include <map>
#include <optional>
#include <string>

namespace kiln::detail {

using mlir::InFlightDiagnostic;
using mlir::Location;
using mlir::MLIRContext;

class ConfigParser {
public:
  ConfigParser(MLIRContext *context, Config &config,
               std::optional<int64_t> worldSize)
      : context(context), config(config), worldSize(worldSize) {}

  /// Parses one TOML document named `name` into the config.
  void parseDocument(llvm::StringRef name, llvm::StringRef text);
  /// Applies one `section.key=value` override.
  void parseOverride(const std::string &assignment);
  /// Checks what spans several keys; run once all keys are in.
  void validate();

  bool failed = false;

private:
  Location loc(llvm::StringRef name, const toml::source_region &region) {
    return mlir::FileLineColLoc::get(context, name, region.begin.line,
                                     region.begin.column);
  }
  InFlightDiagnostic error(Location at) {
    failed = true;
    return mlir::emitError(at);
  }
  /// A key written before any section header.
  void reportStrayKey(const std::string &key, Location at);
  void parseSection(llvm::StringRef name, const std::string &section,
                    const toml::table &table);
  /// Sets one key; `valueAt` is where its value was written.
  void setKey(llvm::StringRef name, const std::string &section,
              const std::string &key, const toml::node &value,
              const toml::source_region &keyRegion, Location valueAt);
  bool assign(const KeySpec &spec, const toml::node &value, Location at);
  bool checkRange(const KeySpec &spec, double value, Location at,
                  const std::string &shown);
  Location keyLoc(const std::string &key) {
    return keyLocation(context, config, key);
  }

  MLIRContext *context;
  Config &config;
  /// The run's rank count, when known: validate() resolves the mesh for it.
  std::optional<int64_t> worldSize;
  /// Locations of keys set by overrides, which have no line in the file.
  std::map<std::string, Location> overrideLocs;
};

} // namespace kiln::detail

#endif // KILN_FRONTEND_CONFIGPARSERIMPL_H
