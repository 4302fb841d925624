//===- DevicePrelude.cpp - Numerics every generated kernel starts with ----===//
//
// kiln_bf16_bits is numerics::toBf16Bits written for the device: adding
// 0x7fff plus the kept half's lowest bit rounds the discarded half to
// nearest, ties to even; a NaN keeps its sign and upper payload and gets
// the quiet bit.
//
//===----------------------------------------------------------------------===//

#include "DevicePrelude.h"

namespace kiln::runtime::cuda {

const char *devicePrelude() {
  return R"(#include <cuda_fp8.h>
typedef unsigned short kiln_u16;
typedef unsigned char kiln_u8;
__device__ __forceinline__ float kiln_from_bf16(kiln_u16 b) {
  return __uint_as_float(((unsigned)b) << 16);
}
__device__ __forceinline__ kiln_u16 kiln_bf16_bits(float x) {
  unsigned u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (kiln_u16)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (kiln_u16)(u >> 16);
}
__device__ __forceinline__ kiln_u8 kiln_e4m3_bits(float x) {
  return (kiln_u8)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}
__device__ __forceinline__ kiln_u8 kiln_e5m2_bits(float x) {
  return (kiln_u8)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
}
__device__ __forceinline__ float kiln_from_e4m3(kiln_u8 c) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(c, __NV_E4M3)));
}
__device__ __forceinline__ float kiln_from_e5m2(kiln_u8 c) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(c, __NV_E5M2)));
}
__device__ __forceinline__ float kiln_round_bf16(float x) {
  return kiln_from_bf16(kiln_bf16_bits(x));
}
__device__ __forceinline__ float kiln_round_e4m3(float x) {
  return kiln_from_e4m3(kiln_e4m3_bits(x));
}
__device__ __forceinline__ float kiln_round_e5m2(float x) {
  return kiln_from_e5m2(kiln_e5m2_bits(x));
}
)";
}

} // namespace kiln::runtime::cuda
