# The CUDA backend's op kernels (runtime/include/kiln/Runtime/Cuda/
# OpKernels.h; docs/cuda-op-kernels.md): their CUDA C++ and their launches
# are plain C++, built into KilnRuntime with or without CUDA, one file per
# op family under lib/Cuda/Kernels (each family's CUDA C++ and launches).
target_sources(KilnRuntime PRIVATE
  lib/Cuda/Kernels/Library.cpp
  lib/Cuda/Kernels/Layout.cpp
  lib/Cuda/Kernels/Embedding.cpp
  lib/Cuda/Kernels/Rope.cpp
  lib/Cuda/Kernels/Attention.cpp
  lib/Cuda/Kernels/Loss.cpp
  lib/Cuda/Kernels/Optim.cpp
  lib/Cuda/Kernels/Fp8.cpp
  lib/Cuda/Kernels/MeanDivide.cpp
  lib/Cuda/Kernels/CheckFinite.cpp
)

# Both kernel checks run generated CUDA C++ on the host through one shim
# of the CUDA built-ins (tests/Cuda/HostShim.h).
target_sources(kiln-group-kernel-check PRIVATE tests/Cuda/HostShim.cpp)

# The op kernels against the CPU backend's ops, on the host
# (tests/Cuda/op-kernels-host.test) or on GPU 0 (ctest gpu-op-kernels),
# where attention also runs through cuDNN's fused SDPA (with cuDNN:
# runtime/cmake/Cudnn.cmake).
add_executable(kiln-op-kernel-check tests/Cuda/OpKernelCheck.cpp
  tests/Cuda/OpKernelDevices.cpp tests/Cuda/OpKernelCudnn.cpp
  tests/Cuda/OpKernelTolerance.cpp tests/Cuda/OpKernelInputs.cpp
  tests/Cuda/HostShim.cpp)
target_link_libraries(kiln-op-kernel-check PRIVATE KilnRuntime
  ${CMAKE_DL_LIBS})
if(KILN_HAVE_CUDA)
  target_compile_definitions(kiln-op-kernel-check PRIVATE KILN_HAVE_CUDA=1)
  target_link_libraries(kiln-op-kernel-check PRIVATE CUDA::cudart)
endif()
