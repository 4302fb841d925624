# The CUDA executor: the plan's entries as device actions (group kernels,
# op kernels, cuBLASLt GEMMs, NCCL collectives), eager and as CUDA graphs.
target_sources(KilnRuntime PRIVATE
  lib/Cuda/CudaActions.cpp
  lib/Cuda/CudaActionsEnqueue.cpp
  lib/Cuda/CudaExecutor.cpp
  lib/Cuda/CudaExecutorMemory.cpp
  lib/Cuda/CudaExecutorRun.cpp
)
# The executor talks to NCCL through the communicator library.
target_link_libraries(KilnRuntime PRIVATE KilnComm)

# The CUDA backend against the CPU backend on the same plans and weights
# (scripts/gpu-test; exits 77, skipped, without a GPU).
add_executable(kiln-backend-compare tests/Cuda/BackendCompare.cpp)
target_compile_definitions(kiln-backend-compare PRIVATE KILN_HAVE_CUDA=1)
target_link_libraries(kiln-backend-compare PRIVATE KilnRuntime KilnComm)
if(KILN_HAVE_NCCL)
  target_compile_definitions(KilnRuntime PRIVATE KILN_HAVE_NCCL=1)
endif()

# The executor's actions for a plan, built on the host as a dry run and
# checked (buffers, launch limits, collectives waited for): no GPU needed.
add_executable(kiln-cuda-actions-check tests/Cuda/ActionsCheck.cpp)
target_link_libraries(kiln-cuda-actions-check PRIVATE KilnRuntime KilnComm)
