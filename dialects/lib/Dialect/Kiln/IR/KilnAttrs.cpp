//===- KilnAttrs.cpp - Attributes of the kiln dialect ---------------------===//

#include "kiln/Dialect/Kiln/IR/KilnAttrs.h"
#include "kiln/Dialect/Kiln/IR/KilnDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/Regex.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace kiln;

#include "kiln/Dialect/Kiln/IR/KilnEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "kiln/Dialect/Kiln/IR/KilnAttrs.cpp.inc"

// #kiln.init<ones> | #kiln.init<normal, std = S>
//                  | #kiln.init<trunc_normal, std = S, a = A, b = B>
Attribute InitAttr::parse(AsmParser &parser, Type) {
  StringRef keyword;
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseLess() || parser.parseKeyword(&keyword))
    return {};
  std::optional<InitKind> kind = symbolizeInitKind(keyword);
  if (!kind) {
    parser.emitError(loc) << "unknown initialiser '" << keyword
                          << "'; expected zeros, ones, normal or trunc_normal";
    return {};
  }
  double std = 0.0, lo = 0.0, hi = 0.0;
  auto parseField = [&](StringRef name, double &value) -> ParseResult {
    return failure(parser.parseComma() || parser.parseKeyword(name) ||
                   parser.parseEqual() || parser.parseFloat(value));
  };
  if (*kind == InitKind::normal || *kind == InitKind::trunc_normal)
    if (parseField("std", std))
      return {};
  if (*kind == InitKind::trunc_normal)
    if (parseField("a", lo) || parseField("b", hi))
      return {};
  if (parser.parseGreater())
    return {};
  return parser.getChecked<InitAttr>(loc, parser.getContext(), *kind,
                                     llvm::APFloat(std), llvm::APFloat(lo),
                                     llvm::APFloat(hi));
}

void InitAttr::print(AsmPrinter &printer) const {
  printer << "<" << stringifyInitKind(getKind());
  if (getKind() == InitKind::normal || getKind() == InitKind::trunc_normal)
    printer << ", std = " << getStd();
  if (getKind() == InitKind::trunc_normal)
    printer << ", a = " << getLo() << ", b = " << getHi();
  printer << ">";
}

LogicalResult InitAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               InitKind kind, llvm::APFloat stdAP,
                               llvm::APFloat loAP, llvm::APFloat hiAP) {
  double std = stdAP.convertToDouble(), lo = loAP.convertToDouble(),
         hi = hiAP.convertToDouble();
  bool random = kind == InitKind::normal || kind == InitKind::trunc_normal;
  if (random && !(std > 0.0 && std::isfinite(std)))
    return emitError() << "init std must be positive and finite, got " << std;
  if (kind == InitKind::trunc_normal && !(lo < hi))
    return emitError() << "trunc_normal bounds must satisfy a < b, got a = "
                       << lo << ", b = " << hi;
  return success();
}

//===----------------------------------------------------------------------===//
// #kiln.float8
//===----------------------------------------------------------------------===//

namespace {
/// [float8]'s TOML defaults: the parser fills in what is left out, the
/// printer leaves out what equals them.
constexpr bool kAutoFilterSmallKnDefault = true;
constexpr int64_t kAmaxHistoryLenDefault = 16;
} // namespace

// #kiln.float8<recipe = R (, key = value)*>, the keys in any order.
Attribute Float8Attr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  std::optional<Fp8Recipe> recipe;
  ArrayAttr filters = parser.getBuilder().getArrayAttr({});
  bool autoFilter = kAutoFilterSmallKnDefault, forceOutput = false,
       enableFsdpFloat8AllGather = false;
  int64_t historyLen = kAmaxHistoryLenDefault;
  AmaxComputeAlgo algo = AmaxComputeAlgo::max;
  llvm::StringSet<> seen;

  auto parseBool = [&](bool &out) -> ParseResult {
    SMLoc at = parser.getCurrentLocation();
    StringRef word;
    if (parser.parseKeyword(&word))
      return failure();
    if (word != "true" && word != "false")
      return parser.emitError(at, "expected true or false");
    out = word == "true";
    return success();
  };
  auto parseField = [&]() -> ParseResult {
    SMLoc at = parser.getCurrentLocation();
    StringRef key;
    if (parser.parseKeyword(&key) || parser.parseEqual())
      return failure();
    if (!seen.insert(key).second)
      return parser.emitError(at, "'") << key << "' given twice";
    if (key == "recipe" || key == "amax_compute_algo") {
      SMLoc valueAt = parser.getCurrentLocation();
      StringRef word;
      if (parser.parseKeyword(&word))
        return failure();
      if (key == "recipe") {
        recipe = symbolizeFp8Recipe(word);
        if (!recipe)
          return parser.emitError(valueAt, "unknown FP8 recipe '")
                 << word << "'; expected tensorwise, rowwise or delayed";
        return success();
      }
      std::optional<AmaxComputeAlgo> a = symbolizeAmaxComputeAlgo(word);
      if (!a)
        return parser.emitError(valueAt, "unknown amax_compute_algo '")
               << word << "'; expected max or most_recent";
      algo = *a;
      return success();
    }
    if (key == "filter_fqns")
      return parser.parseAttribute(filters);
    if (key == "auto_filter_small_kn")
      return parseBool(autoFilter);
    if (key == "force_output_projection")
      return parseBool(forceOutput);
    if (key == "enable_fsdp_float8_all_gather")
      return parseBool(enableFsdpFloat8AllGather);
    if (key == "amax_history_len")
      return parser.parseInteger(historyLen);
    return parser.emitError(at, "unknown #kiln.float8 field '") << key << "'";
  };
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::LessGreater,
                                     parseField))
    return {};
  if (!recipe) {
    parser.emitError(loc, "#kiln.float8 needs a recipe");
    return {};
  }
  return parser.getChecked<Float8Attr>(
      loc, parser.getContext(), *recipe, filters, autoFilter, forceOutput,
      enableFsdpFloat8AllGather, historyLen, algo);
}

void Float8Attr::print(AsmPrinter &printer) const {
  printer << "<recipe = " << stringifyFp8Recipe(getRecipe());
  if (!getFilterFqns().empty()) {
    printer << ", filter_fqns = ";
    printer.printAttribute(getFilterFqns());
  }
  auto flag = [&](StringRef key, bool value, bool byDefault) {
    if (value != byDefault)
      printer << ", " << key << " = " << (value ? "true" : "false");
  };
  flag("auto_filter_small_kn", getAutoFilterSmallKn(),
       kAutoFilterSmallKnDefault);
  flag("force_output_projection", getForceOutputProjection(), false);
  flag("enable_fsdp_float8_all_gather", getEnableFsdpFloat8AllGather(), false);
  if (getAmaxHistoryLen() != kAmaxHistoryLenDefault)
    printer << ", amax_history_len = " << getAmaxHistoryLen();
  if (getAmaxComputeAlgo() != AmaxComputeAlgo::max)
    printer << ", amax_compute_algo = "
            << stringifyAmaxComputeAlgo(getAmaxComputeAlgo());
  printer << ">";
}

LogicalResult Float8Attr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 Fp8Recipe recipe, ArrayAttr filterFqns, bool,
                                 bool, bool enableFsdpFloat8AllGather,
                                 int64_t amaxHistoryLen, AmaxComputeAlgo) {
  // float8_c1
  if (!filterFqns)
    return emitError() << "float8.filter_fqns must be an array of strings";
  for (Attribute a : filterFqns) {
    auto pattern = dyn_cast<StringAttr>(a);
    if (!pattern)
      return emitError() << "float8.filter_fqns must hold strings, not " << a;
    std::string why;
    if (!llvm::Regex(pattern.getValue()).isValid(why))
      return emitError() << "float8.filter_fqns: the pattern '"
                         << pattern.getValue() << "' does not compile: " << why;
  }
  // float8_c2
  if (enableFsdpFloat8AllGather && recipe != Fp8Recipe::tensorwise)
    return emitError()
           << "float8.enable_fsdp_float8_all_gather needs recipe = "
              "\"tensorwise\" (the "
           << stringifyFp8Recipe(recipe)
           << " recipe's scales are not one per tensor, so a shard cannot be "
              "cast before the gather)";
  // float8_c3
  if (amaxHistoryLen < 1 || amaxHistoryLen > kMaxAmaxHistoryLen)
    return emitError() << "float8.amax_history_len must lie in [1, "
                       << kMaxAmaxHistoryLen << "], got " << amaxHistoryLen;
  return success();
}

SmallVector<StringRef> Float8Attr::getFilterPatterns() const {
  SmallVector<StringRef> patterns;
  for (Attribute a : getFilterFqns())
    patterns.push_back(cast<StringAttr>(a).getValue());
  return patterns;
}

//===----------------------------------------------------------------------===//
// #kiln.fp8_choice
//===----------------------------------------------------------------------===//

bool Fp8ChoiceAttr::isFp8() const {
  return getReason() == Fp8Reason::eligible ||
         getReason() == Fp8Reason::forced_output_projection;
}

std::string Fp8ChoiceAttr::describe() const {
  switch (getReason()) {
  case Fp8Reason::eligible:
    return "";
  case Fp8Reason::forced_output_projection:
    return "forced output projection";
  case Fp8Reason::output_projection:
    return "output projection";
  case Fp8Reason::not_divisible_by_16:
    return "dim not divisible by 16";
  case Fp8Reason::filtered:
    return ("filtered by pattern '" + getPattern().getValue() + "'").str();
  case Fp8Reason::small_gemm:
    return "small GEMM";
  }
  llvm_unreachable("unknown Fp8Reason");
}

// #kiln.fp8_choice<fp8|bf16 (, reason (= "pattern")?)?>
Attribute Fp8ChoiceAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef dtype;
  if (parser.parseLess() || parser.parseKeyword(&dtype))
    return {};
  if (dtype != "fp8" && dtype != "bf16") {
    parser.emitError(loc, "expected fp8 or bf16, got '") << dtype << "'";
    return {};
  }
  Fp8Reason reason = Fp8Reason::eligible;
  StringAttr pattern;
  if (succeeded(parser.parseOptionalComma())) {
    SMLoc at = parser.getCurrentLocation();
    StringRef word;
    if (parser.parseKeyword(&word))
      return {};
    std::optional<Fp8Reason> r = symbolizeFp8Reason(word);
    if (!r || *r == Fp8Reason::eligible) {
      parser.emitError(at, "unknown FP8 reason '") << word << "'";
      return {};
    }
    reason = *r;
    if (succeeded(parser.parseOptionalEqual())) {
      std::string text;
      if (parser.parseString(&text))
        return {};
      pattern = parser.getBuilder().getStringAttr(text);
    }
  }
  if (parser.parseGreater())
    return {};
  auto choice = parser.getChecked<Fp8ChoiceAttr>(loc, parser.getContext(),
                                                 reason, pattern);
  // fp8_choice_c2
  if (choice && choice.isFp8() != (dtype == "fp8")) {
    if (reason == Fp8Reason::eligible)
      parser.emitError(loc, "bf16 needs its reason: output_projection, "
                            "not_divisible_by_16, filtered or small_gemm");
    else
      parser.emitError(loc, "'")
          << stringifyFp8Reason(reason) << "' is a reason for "
          << (choice.isFp8() ? "fp8" : "bf16") << ", not " << dtype;
    return {};
  }
  return choice;
}

void Fp8ChoiceAttr::print(AsmPrinter &printer) const {
  printer << "<" << (isFp8() ? "fp8" : "bf16");
  if (getReason() != Fp8Reason::eligible)
    printer << ", " << stringifyFp8Reason(getReason());
  if (getPattern()) {
    printer << " = ";
    printer.printString(getPattern().getValue());
  }
  printer << ">";
}

LogicalResult
Fp8ChoiceAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                      Fp8Reason reason, StringAttr pattern) {
  // fp8_choice_c1
  if ((reason == Fp8Reason::filtered) != static_cast<bool>(pattern))
    return emitError() << "#kiln.fp8_choice: a pattern goes with the reason "
                          "'filtered' and no other";
  return success();
}

LogicalResult MeshAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               int64_t pp, int64_t dpShard, int64_t tp) {
  // mesh_c1
  if (pp < 1 || dpShard < 1 || tp < 1)
    return emitError() << "#kiln.mesh: pp, dp_shard and tp must be at least "
                          "1, got pp = "
                       << pp << ", dp_shard = " << dpShard << ", tp = " << tp;
  // mesh_c2
  int64_t ranks, planes;
  if (__builtin_mul_overflow(dpShard, tp, &planes) ||
      __builtin_mul_overflow(planes, pp, &ranks) ||
      ranks > std::numeric_limits<int32_t>::max())
    return emitError() << "#kiln.mesh: pp x dp_shard x tp (" << pp << " x "
                       << dpShard << " x " << tp
                       << ") must be below 2^31 ranks";
  return success();
}

MeshAttr kiln::getModuleMesh(Operation *op) {
  auto module =
      isa<ModuleOp>(op) ? cast<ModuleOp>(op) : op->getParentOfType<ModuleOp>();
  return module ? module->getAttrOfType<MeshAttr>(KilnDialect::kMeshAttrName)
                : MeshAttr();
}

void KilnDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "kiln/Dialect/Kiln/IR/KilnAttrs.cpp.inc"
      >();
}
