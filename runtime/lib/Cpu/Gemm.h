//===- Gemm.h - The CPU backend's f32 matrix product ------------*- C++ -*-===//
//
// Internal to the CPU kernels: the one place that chooses who multiplies
// matrices. gemm() is OpenBLAS's cblas_sgemm where Kiln is built with it
// (KILN_HAVE_OPENBLAS; runtime/CMakeLists.txt says which at configure
// time) and not told otherwise (setCpuGemm: `kiln train --cpu-gemm`), else
// portableGemm(), Kiln's own loops, which are always compiled
// so that the tests compare them with OpenBLAS wherever both exist.
//
// portableGemm packs blocks of both operands into panels (kKc deep, the
// right operand kNc columns wide, the left kMc rows tall) and multiplies
// each register tile of C with lane-wise vector operations (Simd.h): the
// baseline (SSE2) copy and the AVX2 copy perform the same f32 operations in
// the same order, one rounded product and one rounded sum per term. Each
// element of C is the sum over the inner dimension in increasing order,
// kKc terms at a time: each block's terms summed from zero, the block added
// to C. Threads split C into row or column ranges, each element computed by
// one thread in that fixed order, so the bits are the same for every
// thread count and every run; they differ from OpenBLAS's in the last bits.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_LIB_CPU_GEMM_H
#define KILN_RUNTIME_LIB_CPU_GEMM_H

#include <cstdint>

namespace kiln::runtime::cpu::detail {

/// A row-major operand op(X): element (r, c) is data[r * ld + c], or
/// data[c * ld + r] when `transposed`.
struct GemmOperand {
  const float *data;
  int64_t ld;
  bool transposed;
};

/// C [m, n] (row stride ldc) = op(A) [m, k] op(B) [k, n], added to C when
/// `accumulate` (else C is only written). m, n and k are at least 1, fit
/// in an int, and C overlaps neither operand.
void gemm(const GemmOperand &a, const GemmOperand &b, float *c, int64_t ldc,
          int64_t m, int64_t n, int64_t k, bool accumulate);

/// The same product by Kiln's own loops, on cpuThreads() threads.
void portableGemm(const GemmOperand &a, const GemmOperand &b, float *c,
                  int64_t ldc, int64_t m, int64_t n, int64_t k,
                  bool accumulate);

/// "OpenBLAS" or "portable": who gemm() is.
const char *gemmLibrary();

/// Whether the build has OpenBLAS (KILN_HAVE_OPENBLAS).
bool haveOpenBlas();

/// Makes gemm() the portable loops even where OpenBLAS is built in
/// (setCpuGemm); false goes back to the build's default.
void usePortableGemm(bool portable);

/// Gives the GEMM library the kernels' thread count (setCpuThreads).
void setGemmThreads(int n);

} // namespace kiln::runtime::cpu::detail

#endif // KILN_RUNTIME_LIB_CPU_GEMM_H
