# The cuBLASLt GEMMs (kiln/Runtime/Cuda/Gemm.h, docs/cuda-gemm.md), included
# from runtime/CMakeLists.txt with the CUDA backend only. cuBLASLt is linked
# shared, like cudart: neither links libcuda, which cudart loads at run time.
target_sources(KilnRuntime PRIVATE
  lib/Cuda/Gemm.cpp
  lib/Cuda/GemmLt.cpp
  lib/Cuda/GemmKernels.cpp
)
target_link_libraries(KilnRuntime PRIVATE CUDA::cublasLt)

# Every GEMM kind against an fp64 host reference on GPU 0; without a GPU it
# still compiles the wrapper's kernels with NVRTC, then exits 77 (skipped).
# It and the benchmark look inside the wrapper (lib/Cuda/GemmInternal.h).
add_executable(kiln-gemm-check tests/Cuda/GemmCheck.cpp)
target_include_directories(kiln-gemm-check PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/lib/Cuda)
target_link_libraries(kiln-gemm-check PRIVATE KilnRuntime CUDA::cudart
  CUDA::cublasLt)
add_test(NAME gpu-gemms COMMAND kiln-gemm-check)
set_tests_properties(gpu-gemms PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)

# The wrapper against cuBLASLt's best candidate algorithm on Llama shapes
# (a benchmark, not a test; docs/cuda-gemm.md).
add_executable(kiln-gemm-bench tools/kiln-gemm-bench/kiln-gemm-bench.cpp)
target_include_directories(kiln-gemm-bench PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/lib/Cuda)
target_link_libraries(kiln-gemm-bench PRIVATE KilnRuntime CUDA::cudart
  CUDA::cublasLt)
