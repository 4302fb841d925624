//===- KilnAttrs.cpp - Attributes of the kiln dialect ---------------------===//

#include "kiln/Dialect/Kiln/IR/KilnAttrs.h"
#include "kiln/Dialect/Kiln/IR/KilnDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

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

void KilnDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "kiln/Dialect/Kiln/IR/KilnAttrs.cpp.inc"
      >();
}
