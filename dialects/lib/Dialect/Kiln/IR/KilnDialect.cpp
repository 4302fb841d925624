//===- KilnDialect.cpp - The kiln dialect ---------------------------------===//

#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Dialect/Kiln/IR/KilnAttrs.h"
#include "kiln/Dialect/Kiln/IR/KilnOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"

using namespace mlir;
using namespace kiln;

#include "kiln/Dialect/Kiln/IR/KilnDialect.cpp.inc"
#include "kiln/Dialect/Kiln/IR/KilnInterfaces.cpp.inc"

void KilnDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "kiln/Dialect/Kiln/IR/KilnOps.cpp.inc"
      >();
  registerAttributes();
}

/// Parameter and input markers on function arguments: `kiln.param` names a
/// model parameter (and then `kiln.init` must say how to initialise it),
/// `kiln.input` names a data input such as `tokens`.
LogicalResult KilnDialect::verifyRegionArgAttribute(Operation *op,
                                                    unsigned regionIndex,
                                                    unsigned argIndex,
                                                    NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  auto fail = [&]() {
    return op->emitOpError() << "argument " << argIndex << ": '" << name
                             << "' ";
  };
  if (name == kParamAttrName || name == kInputAttrName ||
      name == kStateAttrName) {
    auto str = dyn_cast<StringAttr>(attr.getValue());
    if (!str || str.getValue().empty())
      return fail() << "must be a non-empty string";
    return success();
  }
  if (name == kInitAttrName) {
    if (!isa<InitAttr>(attr.getValue()))
      return fail() << "must be a #kiln.init attribute";
    return success();
  }
  if (name == kShardOfAttrName) {
    auto parts = dyn_cast<ArrayAttr>(attr.getValue());
    if (!parts)
      return fail() << "must be an array of {name, offset, shape, init}";
    for (Attribute part : parts) {
      auto dict = dyn_cast<DictionaryAttr>(part);
      if (!dict || !dict.getAs<StringAttr>("name") ||
          !dict.getAs<IntegerAttr>("offset") ||
          !dict.getAs<DenseI64ArrayAttr>("shape") ||
          !dict.getAs<InitAttr>("init"))
        return fail() << "must be an array of {name, offset, shape, init}";
    }
    return success();
  }
  if (name == kTpShardAttrName) {
    if (!isa<TpShardAttr>(attr.getValue()))
      return fail() << "must be a #kiln.tp_shard attribute";
    return success();
  }
  return fail() << "is not an attribute of the kiln dialect";
}

/// Result markers: `kiln.grad`, `kiln.state` and `kiln.output` name what a
/// result is.
LogicalResult KilnDialect::verifyRegionResultAttribute(Operation *op,
                                                       unsigned regionIndex,
                                                       unsigned resultIndex,
                                                       NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name != kGradAttrName && name != kStateAttrName &&
      name != kOutputAttrName)
    return op->emitOpError() << "result " << resultIndex << ": '" << name
                             << "' is not an attribute of the kiln dialect";
  auto str = dyn_cast<StringAttr>(attr.getValue());
  if (!str || str.getValue().empty())
    return op->emitOpError() << "result " << resultIndex << ": '" << name
                             << "' must be a non-empty string";
  return success();
}

bool KilnDialect::isSelectiveAcPolicy(StringRef policy) {
  int64_t blocks;
  return policy == "gemm" || policy == "op" ||
         (!policy.getAsInteger(10, blocks) && blocks >= 1);
}

/// Discardable attributes on operations: `kiln.mesh` is a #kiln.mesh on a
/// module. The others (kiln.float8, kiln.training, kiln.selective_ac, the
/// passes' marks) are checked by their readers.
LogicalResult KilnDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  if (attr.getName().getValue() != kMeshAttrName)
    return success();
  if (!isa<ModuleOp>(op))
    return op->emitOpError() << "'" << kMeshAttrName << "' belongs on a module";
  if (!isa<MeshAttr>(attr.getValue()))
    return op->emitOpError()
           << "'" << kMeshAttrName << "' must be a #kiln.mesh attribute";
  return success();
}
