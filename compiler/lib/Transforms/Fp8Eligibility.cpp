//===- Fp8Eligibility.cpp - Which linears run in FP8, and why -------------===//

#include "kiln/Transforms/Fp8Eligibility.h"
#include "kiln/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/Regex.h"

using namespace mlir;
using namespace kiln;

FailureOr<std::optional<Fp8Options>> Fp8Options::fromModule(ModuleOp module) {
  Attribute raw = module->getAttr(kFloat8Attr);
  if (!raw)
    return std::optional<Fp8Options>();
  auto dict = dyn_cast<DictionaryAttr>(raw);
  auto fail = [&](StringRef what) {
    return module.emitError("kiln.float8: ") << what;
  };
  if (!dict)
    return fail("must be a dictionary");
  Fp8Options o;
  if (auto r = dict.getAs<StringAttr>("recipe"))
    o.recipe = r.str();
  if (o.recipe != "tensorwise" && o.recipe != "rowwise" &&
      o.recipe != "delayed")
    return fail("recipe must be tensorwise, rowwise or delayed, got '" +
                o.recipe + "'");
  if (auto len = dict.getAs<IntegerAttr>("amax_history_len"))
    o.amaxHistoryLen = len.getInt();
  if (o.amaxHistoryLen < 1)
    return fail("amax_history_len must be at least 1");
  if (auto algo = dict.getAs<StringAttr>("amax_compute_algo"))
    o.amaxComputeAlgo = algo.str();
  if (o.amaxComputeAlgo != "max" && o.amaxComputeAlgo != "most_recent")
    return fail("amax_compute_algo must be max or most_recent, got '" +
                o.amaxComputeAlgo + "'");
  if (auto fqns = dict.getAs<ArrayAttr>("filter_fqns"))
    for (Attribute a : fqns) {
      auto s = dyn_cast<StringAttr>(a);
      std::string error;
      if (!s || !llvm::Regex(s.getValue()).isValid(error))
        return fail("filter_fqns holds an invalid pattern: " + error);
      o.filterFqns.push_back(s.str());
    }
  auto flag = [&](StringRef name, bool &out) {
    if (auto b = dict.getAs<BoolAttr>(name))
      out = b.getValue();
  };
  flag("auto_filter_small_kn", o.autoFilterSmallKN);
  flag("force_output_projection", o.forceOutputProjection);
  flag("all_gather", o.allGather);
  if (o.allGather && o.recipe != "tensorwise")
    return fail("the FP8 all-gather needs the tensorwise recipe");
  return std::optional<Fp8Options>(o);
}

bool kiln::isSmallFp8Gemm(StringRef recipe, int64_t n, int64_t k) {
  if (recipe == "rowwise")
    return k <= 2048 || n <= 1024 || (k <= 4096 && n <= 2048);
  return n <= 4096 && k <= 1024;
}

std::vector<Fp8Decision> kiln::decideFp8Linears(func::FuncOp func,
                                                const Fp8Options &options) {
  std::vector<Fp8Decision> decisions;
  func.walk([&](LinearOp linear) {
    if (linear->hasAttr(kRecomputedAttr))
      return;
    auto w = cast<RankedTensorType>(linear.getWeight().getType());
    auto x = cast<RankedTensorType>(linear.getInput().getType());
    Fp8Decision d{linear,
                  linear.getParam().str(),
                  linear.getRole(),
                  x.getNumElements() / std::max<int64_t>(1, x.getShape().back()),
                  w.getDimSize(0),
                  w.getDimSize(1),
                  false,
                  ""};
    bool output = d.role == LinearRole::output;
    if (output && !options.forceOutputProjection)
      d.reason = "output projection";
    else if (d.m % 16 || d.n % 16 || d.k % 16)
      d.reason = "dim not divisible by 16";
    for (const std::string &pattern : options.filterFqns)
      if (d.reason.empty() && llvm::Regex(pattern).match(d.param))
        d.reason = "filtered by pattern '" + pattern + "'";
    if (d.reason.empty() && options.autoFilterSmallKN &&
        isSmallFp8Gemm(options.recipe, d.n, d.k))
      d.reason = "small GEMM";
    d.fp8 = d.reason.empty();
    decisions.push_back(std::move(d));
  });
  return decisions;
}
