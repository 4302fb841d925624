//===- Fp8Select.cpp - Which linears run in FP8, and why ------------------===//
//
// The one place the FP8 eligibility rules live. Before the shard phase,
// every kiln.linear of every function gets `fp8 = #kiln.fp8_choice<...>`:
// FP8 or BF16 and the reason. kiln-fsdp (which weights the FP8 all-gather
// groups apart), kiln-fp8-linear (which linears it rewrites) and `kiln
// explain --fp8` (what it prints) read these marks and decide nothing
// again. A recomputed clone of a linear (activation checkpointing) has the
// linear's shapes and parameter, so it gets, or keeps, the same mark.
//
//===----------------------------------------------------------------------===//

#include "kiln/Transforms/Fp8Policy.h"
#include "kiln/Transforms/Passes.h"

#include "llvm/Support/Debug.h"
#include "llvm/Support/Regex.h"

#include <map>

#define DEBUG_TYPE "kiln-fp8-select"

namespace kiln {
#define GEN_PASS_DEF_KILNFP8SELECT
#include "kiln/Transforms/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// True when y [m, n] = x [m, k] W^T is too small to gain from FP8 under
/// `recipe`. The thresholds are those of torchao's H100 microbenchmarks of
/// a linear with its casts (torchao/float8 README, "performance"):
/// tensorwise (and delayed, which casts the same way) loses when
/// n <= 4096 and k <= 1024; rowwise when k <= 2048, n <= 1024, or both
/// k <= 4096 and n <= 2048.
bool isSmallGemm(Fp8Recipe recipe, int64_t n, int64_t k) {
  if (recipe == Fp8Recipe::rowwise)
    return k <= 2048 || n <= 1024 || (k <= 4096 && n <= 2048);
  return n <= 4096 && k <= 1024;
}

class Selector {
public:
  explicit Selector(Float8Attr policy) : policy(policy) {
    for (StringRef pattern : policy.getFilterPatterns())
      patterns.emplace_back(pattern, llvm::Regex(pattern));
  }

  /// The decision for `linear`, in the rules' order: the output
  /// projection, then the dims, the user's patterns, the size.
  Fp8ChoiceAttr choose(LinearOp linear) {
    MLIRContext *context = linear.getContext();
    auto x = cast<RankedTensorType>(linear.getInput().getType());
    auto w = cast<RankedTensorType>(linear.getWeight().getType());
    int64_t m = x.getNumElements() / std::max<int64_t>(1, x.getShape().back());
    int64_t n = w.getDimSize(0), k = w.getDimSize(1);
    bool output = linear.getRole() == LinearRole::output;
    if (output && !policy.getForceOutputProjection())
      return Fp8ChoiceAttr::get(context, Fp8Reason::output_projection);
    if (m % 16 || n % 16 || k % 16)
      return Fp8ChoiceAttr::get(context, Fp8Reason::not_divisible_by_16);
    for (auto &[text, regex] : patterns)
      if (regex.match(linear.getParam()))
        return Fp8ChoiceAttr::get(context, Fp8Reason::filtered,
                                  StringAttr::get(context, text));
    if (policy.getAutoFilterSmallKn() && isSmallGemm(policy.getRecipe(), n, k))
      return Fp8ChoiceAttr::get(context, Fp8Reason::small_gemm);
    return Fp8ChoiceAttr::get(context, output
                                           ? Fp8Reason::forced_output_projection
                                           : Fp8Reason::eligible);
  }

private:
  Float8Attr policy;
  SmallVector<std::pair<StringRef, llvm::Regex>> patterns;
};

/// What the user should hear about one function's decisions (the first
/// function with linears: once per module, not per function): that a
/// forced output projection runs in FP8, or that FP8 changes nothing.
void warn(ArrayRef<LinearOp> linears) {
  bool anyFp8 = false;
  for (LinearOp l : linears) {
    Fp8ChoiceAttr choice = l.getFp8Attr();
    anyFp8 |= choice.isFp8();
    if (choice.getReason() == Fp8Reason::forced_output_projection)
      l->emitWarning("the output projection runs in FP8 "
                     "(float8.force_output_projection): its accuracy "
                     "matters most for the loss");
  }
  if (anyFp8 || linears.empty())
    return;
  std::map<std::string, std::vector<std::string>> byReason;
  for (LinearOp l : linears)
    byReason[l.getFp8Attr().describe()].push_back(l.getParam().str());
  std::string why;
  for (const auto &[reason, params] : byReason)
    why += (why.empty() ? "" : "; ") + reason + ": " +
           (params.size() == 1 ? params[0]
                               : std::to_string(params.size()) + " linears (" +
                                     params[0] + ", ...)");
  linears.front()->emitWarning(
      "float8.enable is set but no linear qualifies for FP8, so the model "
      "trains in BF16: ")
      << why << " (`kiln explain --fp8` lists each)";
}

struct Fp8SelectPass : kiln::impl::KilnFp8SelectBase<Fp8SelectPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<Float8Attr> policy = getFp8Policy(module);
    if (failed(policy))
      return signalPassFailure();
    if (!*policy)
      return;
    Selector selector(*policy);
    bool warned = false;
    for (auto func : module.getOps<func::FuncOp>()) {
      SmallVector<LinearOp> forward;
      func.walk([&](LinearOp linear) {
        Fp8ChoiceAttr choice = selector.choose(linear);
        linear.setFp8Attr(choice);
        LLVM_DEBUG(llvm::dbgs()
                   << DEBUG_TYPE << ": @" << func.getSymName() << " "
                   << linear.getParam() << " -> " << choice << "\n");
        if (!linear->hasAttr(kRecomputedAttr))
          forward.push_back(linear);
      });
      if (!warned && !forward.empty()) {
        warn(forward);
        warned = true;
      }
    }
  }
};

} // namespace
