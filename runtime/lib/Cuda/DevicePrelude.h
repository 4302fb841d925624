//===- DevicePrelude.h - The generated kernels' numerics --------*- C++ -*-===//
//
// The device side of the shared numerics (kiln/Runtime/Numerics/Bf16.h and
// Fp8.h): one CUDA C++ text that every source the CUDA backend hands to
// NVRTC begins with (the fused-group kernels, the op kernels, the GEMM
// scale kernels), so bf16 and FP8 rounding is written once for the device.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_DEVICEPRELUDE_H
#define KILN_RUNTIME_CUDA_DEVICEPRELUDE_H

namespace kiln::runtime::cuda {

/// CUDA C++ defining kiln_u16 and kiln_u8 (bf16 and FP8 storage) and the
/// conversions on them, bit for bit the host's:
///   kiln_bf16_bits(float) / kiln_from_bf16(kiln_u16): round to nearest
///     even on the bits, NaN kept quiet with its sign (numerics::toBf16Bits);
///   kiln_e4m3_bits, kiln_e5m2_bits / kiln_from_e4m3, kiln_from_e5m2:
///     cuda_fp8.h's saturating conversions (numerics::toE4m3, ...);
///   kiln_round_bf16, kiln_round_e4m3, kiln_round_e5m2: a float rounded to
///     the format and widened back.
/// Its first line is `#include <cuda_fp8.h>`, the only header a generated
/// source includes (the host checks replace that line with their shim).
const char *devicePrelude();

} // namespace kiln::runtime::cuda

#endif // KILN_RUNTIME_CUDA_DEVICEPRELUDE_H
