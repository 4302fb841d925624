//===- DType.h - Element types of plan values ------------------*- C++ -*-===//

#ifndef KILN_RUNTIME_DTYPE_H
#define KILN_RUNTIME_DTYPE_H

#include <cstdint>

namespace kiln::runtime {

enum class DType { F32, BF16, F16, F64, I32, I64 };
int64_t dtypeBytes(DType type);
const char *dtypeName(DType type);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_DTYPE_H
