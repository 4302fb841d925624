//===- KilnAttrs.h - Attributes of the kiln dialect -------------*- C++ -*-===//

#ifndef KILN_DIALECT_KILN_IR_KILNATTRS_H
#define KILN_DIALECT_KILN_IR_KILNATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"

#include "kiln/Dialect/Kiln/IR/KilnEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "kiln/Dialect/Kiln/IR/KilnAttrs.h.inc"

namespace kiln {
/// The `kiln.mesh` of `op`'s module (or of `op` itself, a module), or null
/// where none is set.
MeshAttr getModuleMesh(mlir::Operation *op);
} // namespace kiln

#endif // KILN_DIALECT_KILN_IR_KILNATTRS_H
