//===- DType.h - Element types of plan values ------------------*- C++ -*-===//

#ifndef KILN_RUNTIME_DTYPE_H
#define KILN_RUNTIME_DTYPE_H

#include <cstdint>

namespace kiln::runtime {

/// F8E4M3 is e4m3fn (no infinities), F8E5M2 IEEE-like: codes of the FP8
/// recipes (kiln/Runtime/Numerics/Fp8.h).
enum class DType { F32, BF16, F16, F64, I32, I64, F8E4M3, F8E5M2 };
inline bool isFp8(DType type) {
  return type == DType::F8E4M3 || type == DType::F8E5M2;
}
int64_t dtypeBytes(DType type);
const char *dtypeName(DType type);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_DTYPE_H
