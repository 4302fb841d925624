//===- Session.cpp - A model loaded for a command -------------------------===//

#include "kiln/Compiler/Session.h"
#include "kiln/Compiler/Pipeline.h"
#include "kiln/Frontend/ModelImporter.h"
#include "kiln/Plan/PlanEmitter.h"

#include "mlir/IR/Verifier.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace kiln;

bool ModelSession::load(const std::string &model,
                        const std::vector<std::string> &overrides) {
  std::string error;
  source = loadModelSource(model, error);
  if (!source) {
    llvm::errs() << error << "\n";
    return false;
  }
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(source->text, source->name),
      llvm::SMLoc());
  handler = std::make_unique<SourceMgrDiagnosticHandler>(sourceMgr, &context);
  FailureOr<Config> parsed = parseConfig(&context, *source, overrides);
  if (failed(parsed))
    return false;
  config = std::move(*parsed);
  return true;
}

std::optional<std::string> ModelSession::compilePlan(bool fuse) {
  OwningOpRef<ModuleOp> module = importModel(&context, *config);
  if (failed(verify(*module)))
    return std::nullopt;
  const PhaseInfo *plan = findPhase("plan");
  auto none = [](unsigned, const PhaseInfo &) { return success(); };
  auto configure = [](PassManager &) { return success(); };
  auto skip = [&](const PhaseInfo &phase) {
    return !fuse && llvm::StringRef(phase.name) == "fuse";
  };
  if (failed(runPipeline(*module, *plan, none, configure, skip)))
    return std::nullopt;
  FailureOr<llvm::json::Value> json = emitPlan(*module);
  if (failed(json))
    return std::nullopt;
  std::string text;
  llvm::raw_string_ostream os(text);
  os << *json;
  return text;
}
