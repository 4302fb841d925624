//===- Simd.h - Vector types and AVX2 dispatch ------------------*- C++ -*-===//
//
// Internal to the CPU kernels. Float4 and Float8 hold four and eight floats;
// with GCC and Clang they are vector extension types, which the compiler
// keeps in SSE or AVX registers, and elsewhere plain arrays. The helpers
// below are the only operations the kernels use on them, each lane-wise.
//
// The kernels are compiled for the baseline ISA (SSE2 on x86-64). A kernel
// may compile a second copy of its loops for AVX2 (functions marked
// KILN_TARGET_AVX2, which inline the same templates) and choose it at run
// time with useAvx2(). Both copies must perform the same IEEE operations on
// every element in the same order: the kernels are compiled with
// -ffp-contract=off and the AVX2 target does not enable FMA, so nothing is
// fused, and reductions keep fixed lanes in the source. The choice then
// changes speed, never bits; tests compare the two by clearing allowAvx2.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_LIB_CPU_SIMD_H
#define KILN_RUNTIME_LIB_CPU_SIMD_H

#include <atomic>
#include <cstring>

namespace kiln::runtime::cpu::detail {

#if defined(__GNUC__) || defined(__clang__)
typedef float Float4 __attribute__((vector_size(16)));
typedef float Float8 __attribute__((vector_size(32)));
#define KILN_ALWAYS_INLINE inline __attribute__((always_inline))
#else
struct Float4 {
  float lane[4];
};
struct Float8 {
  float lane[8];
};
#define KILN_ALWAYS_INLINE inline
#endif

#if (defined(__GNUC__) || defined(__clang__)) &&                               \
    (defined(__x86_64__) || defined(__i386__))
#define KILN_HAVE_AVX2_PATH 1
#define KILN_TARGET_AVX2 __attribute__((target("avx2")))
#else
#define KILN_HAVE_AVX2_PATH 0
#endif

/// Floats per vector of type V.
template <typename V> constexpr int lanes() {
  return int(sizeof(V) / sizeof(float));
}

// Vectors are passed by reference only: GCC warns (-Wpsabi) about
// returning an AVX vector from a function compiled without AVX, even one
// that is always inlined into AVX code.

template <typename V> KILN_ALWAYS_INLINE void vzero(V &v) {
  std::memset(&v, 0, sizeof v);
}

/// Unaligned load and store.
template <typename V> KILN_ALWAYS_INLINE void vload(V &v, const float *p) {
  std::memcpy(&v, p, sizeof v);
}

template <typename V> KILN_ALWAYS_INLINE void vstore(float *p, const V &v) {
  std::memcpy(p, &v, sizeof v);
}

/// acc + b * s in every lane: a rounded product, then a rounded sum.
template <typename V>
KILN_ALWAYS_INLINE void vmulAdd(V &acc, const V &b, float s) {
#if defined(__GNUC__) || defined(__clang__)
  acc += b * s;
#else
  for (int l = 0; l < lanes<V>(); ++l)
    acc.lane[l] += b.lane[l] * s;
#endif
}

/// Whether kernels may take their AVX2 copies; tests clear it to run the
/// baseline copies on a machine with AVX2.
inline std::atomic<bool> allowAvx2{true};

/// True when the CPU (and the OS) support AVX2 and allowAvx2 is set.
inline bool useAvx2() {
#if KILN_HAVE_AVX2_PATH
  static const bool supported = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return supported && allowAvx2.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

} // namespace kiln::runtime::cpu::detail

#endif // KILN_RUNTIME_LIB_CPU_SIMD_H
