# The NCCL communicator (issue #6), included from runtime/CMakeLists.txt
# when the CUDA toolkit exists, after KilnComm: its sources go into
# KilnComm, with NCCL and cudart (which loads libcuda itself; libcuda is
# never linked). NCCL comes with the toolkit here (lib/libnccl.so,
# include/nccl.h). Without it KILN_HAVE_NCCL is OFF and nothing below is
# built; the CUDA executor can test that variable.
find_library(KILN_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
find_path(KILN_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
if(NOT KILN_NCCL_LIBRARY OR NOT KILN_NCCL_INCLUDE_DIR)
  set(KILN_HAVE_NCCL OFF)
  message(STATUS "Kiln NCCL communicator: OFF (libnccl or nccl.h not found)")
  return()
endif()
set(KILN_HAVE_NCCL ON)
message(STATUS "Kiln NCCL communicator: ${KILN_NCCL_LIBRARY}")

target_sources(KilnComm PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/lib/Comm/NcclCommunicator.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/lib/Comm/NcclBootstrap.cpp
)
target_include_directories(KilnComm PRIVATE ${KILN_NCCL_INCLUDE_DIR})
target_link_libraries(KilnComm PRIVATE ${KILN_NCCL_LIBRARY} CUDA::cudart)

# The conformance suite on NCCL, its buffers in device memory, plus the
# NCCL-only tests (streams, capture, u8). Bootstrapped by createCommunicator:
# local without a launcher, MPI under mpirun. Without a usable GPU every
# rank prints "skipped: <why>" and exits 77, which ctest counts as skipped.
# NCCL refuses two ranks on one GPU, hence one rank here.
add_executable(kiln-comm-nccl-tests
  ${CMAKE_CURRENT_SOURCE_DIR}/tests/Comm/CommConformance.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/tests/Comm/CommConformanceProgress.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/tests/Comm/CommConformanceSupport.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/tests/Comm/NcclCommTest.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/tests/Comm/NcclCommTestMain.cpp
)
target_link_libraries(kiln-comm-nccl-tests PRIVATE KilnComm GTest::gtest
  CUDA::cudart Threads::Threads)

add_test(NAME comm-nccl-1
  COMMAND kiln-comm-nccl-tests --expect-host=local --expect-size=1)
add_test(NAME comm-nccl-failure
  COMMAND kiln-comm-nccl-tests --failure-tests --expect-host=local)
set_tests_properties(comm-nccl-1 comm-nccl-failure PROPERTIES
  ENVIRONMENT "${KILN_COMM_TEST_ENV}" TIMEOUT 90 SKIP_RETURN_CODE 77)
# The watchdog times a CUDA graph replay that never completes: exit 1 with
# its line (NcclReplayWatchdog.cpp), 77 without a GPU.
add_executable(kiln-nccl-replay-watchdog
  ${CMAKE_CURRENT_SOURCE_DIR}/tests/Comm/NcclReplayWatchdog.cpp)
target_link_libraries(kiln-nccl-replay-watchdog PRIVATE KilnComm
  CUDA::cudart Threads::Threads)
add_test(NAME comm-nccl-replay-watchdog
  COMMAND kiln-nccl-replay-watchdog)
set_tests_properties(comm-nccl-replay-watchdog PROPERTIES
  ENVIRONMENT "${KILN_COMM_TEST_ENV}" TIMEOUT 20 SKIP_RETURN_CODE 77
  PASS_REGULAR_EXPRESSION "error: NCCL: replay of probe \\(a CUDA graph\\), step 7 on rank 0: not complete after 0.5 s")
add_test(NAME comm-nccl-mpi-1
  COMMAND ${KILN_MPIRUN} 1 $<TARGET_FILE:kiln-comm-nccl-tests>
    --expect-host=mpi --expect-size=1)
set_tests_properties(comm-nccl-mpi-1 PROPERTIES
  ENVIRONMENT "${KILN_COMM_TEST_ENV}" TIMEOUT 90 PROCESSORS 2
  RESOURCE_LOCK kiln-mpirun SKIP_RETURN_CODE 77)
