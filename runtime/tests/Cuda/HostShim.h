//===- HostShim.h - Generated CUDA C++ run on the host ----------*- C++ -*-===//
//
// The checks of the generated kernels (GroupKernelCheck.cpp,
// OpKernelCheck.cpp) run them without a GPU: the source's
// `#include <cuda_fp8.h>` is replaced by a shim of the CUDA built-ins the
// kernels use, the host C++ compiler builds it into a shared library, and
// the check calls it through dlsym.
//
// The shim's model of a launch (kiln_host_grid2, and kiln_host_grid for
// 1-D launches, in the shim's text): the threads of a block (x and y) are
// std::threads meeting at one std::barrier for __syncthreads; the same
// threads then run the next block, so blocks run one after another. `__shared__` variables are statics (one copy,
// shared by the block's threads); dynamic shared memory is the
// KILN_DYNAMIC_SHARED(T, name) macro of the source, here a buffer of the
// launch's size filled with 0xff bytes (NaN floats), so a read of shared
// memory no thread wrote shows up. atomicMax (32- and 64-bit unsigned)
// takes a lock; FP8
// conversions are the CPU backend's, which match cuda_fp8.h bit for bit;
// math functions are the host's libm. __shfl_xor_sync goes through a
// slot per thread and a barrier per warp of 32 threads.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TESTS_CUDA_HOSTSHIM_H
#define KILN_RUNTIME_TESTS_CUDA_HOSTSHIM_H

#include "kiln/Runtime/DType.h"
#include "kiln/Runtime/Support/Error.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::runtime::hostshim {

/// A generated source compiled for the host and loaded.
class HostLibrary {
public:
  /// Compiles `source`, its `#include <cuda_fp8.h>` replaced by the shim,
  /// followed by `epilogue` (the check's extern "C" entry points), into
  /// `base`.so (keeping `base`.cpp) and opens it; the error says why not
  /// when the compiler or dlopen fails.
  static Expected<std::unique_ptr<HostLibrary>>
  compile(const std::string &source, const std::string &epilogue,
          const std::string &base);
  ~HostLibrary();

  /// The address of an extern "C" symbol, or nullptr.
  void *symbol(const std::string &name) const;

private:
  explicit HostLibrary(void *handle) : handle(handle) {}
  void *handle;
};

/// Element `i` of a buffer of `t` (f32, bf16 or FP8 codes) as a float.
float valueAt(DType t, const std::vector<uint8_t> &b, int64_t i);

} // namespace kiln::runtime::hostshim

#endif // KILN_RUNTIME_TESTS_CUDA_HOSTSHIM_H
