//===- Driver.cpp - What the `kiln` subcommands do ------------------------===//

#include "kiln/Driver/Driver.h"
#include "kiln/Compiler/Pipeline.h"
#include "kiln/Driver/Session.h"
#include "kiln/Plan/PlanEmitter.h"
#include "kiln/Frontend/ConfigParser.h"
#include "kiln/Frontend/ConfigSchema.h"
#include "kiln/Frontend/ModelImporter.h"
#include "kiln/Frontend/Presets.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringExtras.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace kiln;

namespace {

/// Hands --mlir-* flags to MLIR's own command-line options (registered
/// even when there are none: the pass manager reads them).
bool applyMlirFlags(const std::vector<std::string> &flags) {
  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  registerPassManagerCLOptions();
  std::vector<const char *> argv = {"kiln compile"};
  for (const std::string &flag : flags)
    argv.push_back(flag.c_str());
  std::string errors;
  llvm::raw_string_ostream os(errors);
  if (!llvm::cl::ParseCommandLineOptions(argv.size(), argv.data(), "", &os)) {
    llvm::StringRef first = llvm::StringRef(errors).trim().split('\n').first;
    first.consume_front("kiln compile: ");
    llvm::errs() << "error: " << first << "\n";
    return false;
  }
  return true;
}

/// Writes `print`'s output to `path` ("-" or empty: stdout); a file is
/// removed again when `print` fails.
LogicalResult
writeOutput(const std::string &path,
            llvm::function_ref<LogicalResult(llvm::raw_ostream &)> print) {
  if (path.empty() || path == "-") {
    LogicalResult result = print(llvm::outs());
    llvm::outs().flush();
    return result;
  }
  std::string error;
  auto file = openOutputFile(path, &error);
  if (!file) {
    llvm::errs() << "error: cannot write '" << path << "': " << error << "\n";
    return failure();
  }
  if (failed(print(file->os())))
    return failure();
  file->os().flush();
  if (file->os().has_error()) {
    llvm::errs() << "error: cannot write '" << path
                 << "': " << file->os().error().message() << "\n";
    file->os().clear_error();
    return failure();
  }
  file->keep();
  return success();
}

LogicalResult printModule(ModuleOp module, llvm::raw_ostream &os) {
  module.print(os);
  os << "\n";
  return success();
}
} // namespace

int kiln::runCompile(const CompileCommand &command) {
  const PhaseInfo *last = &pipelinePhases().back();
  if (!command.emit.empty()) {
    last = findPhase(command.emit);
    if (!last) {
      std::vector<std::string> names;
      for (const PhaseInfo &phase : pipelinePhases())
        names.push_back(phase.name);
      return commandError("unknown phase '" + command.emit +
                  "' for --emit; phases: " + llvm::join(names, ", "));
    }
  }
  if (!applyMlirFlags(command.mlirFlags))
    return 1;

  if (command.rank >= command.worldSize)
    return commandError("--rank " + std::to_string(command.rank) +
                        " is not a rank of a run of --world-size " +
                        std::to_string(command.worldSize));
  ModelSession session;
  if (!session.load(command.model, command.overrides, command.worldSize,
                    command.rank))
    return 1;
  // The result never replaces the model file it came from (a symbolic
  // link or another spelling of the path included).
  bool same = false;
  if (!command.output.empty() && command.output != "-" &&
      !session.source->isPreset &&
      !llvm::sys::fs::equivalent(command.output, session.source->name, same) &&
      same)
    return commandError("-o '" + command.output +
                        "' is the model file itself; write the result "
                        "elsewhere");
  OwningOpRef<ModuleOp> module = importModel(&session.context, *session.config);
  if (!module)
    return 1;
  if (failed(verify(*module)))
    return commandError("internal: the imported IR does not verify");

  if (!command.dumpDir.empty()) {
    if (std::error_code ec = llvm::sys::fs::create_directories(command.dumpDir))
      return commandError("cannot create '" + command.dumpDir + "': " + ec.message());
  }
  auto afterPhase = [&](unsigned index, const PhaseInfo &phase) {
    if (command.dumpDir.empty())
      return success();
    llvm::SmallString<256> path(command.dumpDir);
    llvm::sys::path::append(path, llvm::formatv("{0:02}-{1}.mlir", index,
                                                phase.name)
                                      .str());
    return writeOutput(path.str().str(), [&](llvm::raw_ostream &os) {
      return printModule(*module, os);
    });
  };
  auto configure = [&](PassManager &pm) { return applyPassManagerCLOptions(pm); };
  auto skip = [&](const PhaseInfo &phase) {
    return !command.fuse && llvm::StringRef(phase.name) == "fuse";
  };
  if (failed(runPipeline(*module, *last, afterPhase, configure, skip)))
    return 1;

  if (llvm::StringRef(last->name) != "plan")
    return failed(writeOutput(command.output, [&](llvm::raw_ostream &os) {
             return printModule(*module, os);
           }))
               ? 1
               : 0;
  // Indented for a reader on stdout, compact in files. A file gets the plan
  // as it is written (tens of MB at a thousand layers; a failure removes
  // it), stdout only a whole plan.
  bool toStdout = command.output.empty() || command.output == "-";
  unsigned indent = toStdout ? 1 : 0;
  auto writePlan = [&](const std::string &path) {
    if (path.empty() || path == "-") {
      FailureOr<std::string> plan = emitPlan(*module, indent);
      if (failed(plan))
        return failure();
      llvm::outs() << *plan << "\n";
      llvm::outs().flush();
      return success();
    }
    return writeOutput(path, [&](llvm::raw_ostream &os) {
      if (failed(emitPlan(*module, os, indent)))
        return failure();
      os << "\n";
      return success();
    });
  };
  if (!command.dumpDir.empty()) {
    llvm::SmallString<256> path(command.dumpDir);
    llvm::sys::path::append(
        path,
        llvm::formatv("{0:02}-plan.kplan", pipelinePhases().size()).str());
    if (failed(writePlan(path.str().str())))
      return 1;
  }
  return failed(writePlan(command.output)) ? 1 : 0;
}

int kiln::runConfig(const ConfigCommand &command) {
  if (command.markdown) {
    llvm::outs() << renderConfigMarkdown();
    return 0;
  }
  if (!command.fromHf.empty())
    return runConfigFromHf(command.fromHf);
  if (command.presets) {
    for (const Preset &preset : presets())
      llvm::outs() << llvm::left_justify(preset.name, 14) << preset.summary
                   << "\n";
    return 0;
  }
  if (command.model.empty())
    return commandError(
        "kiln config needs a MODEL, --from-hf, --markdown or --presets");
  ModelSession session;
  if (!session.load(command.model, command.overrides))
    return 1;
  llvm::outs() << (command.source ? session.source->text
                                  : renderConfigToml(*session.config));
  return 0;
}
