# The NCCL communicator (issue #6), included from runtime/CMakeLists.txt
# when the CUDA toolkit exists, after KilnComm: its sources go into
# KilnComm, with NCCL and cudart (which loads libcuda itself; libcuda is
# never linked). NCCL (include/nccl.h, lib/libnccl.so*) is searched in
# KILN_NCCL_ROOT (or $NCCL_ROOT, $NCCL_HOME), the CUDA toolkit, each Python
# site-packages folder's nvidia/nccl (the nvidia-nccl-cu* wheel PyTorch
# installs, which ships lib/libnccl.so.2 without the unversioned link),
# then the system paths. Without it KILN_HAVE_NCCL is OFF and nothing below
# is built; the CUDA executor can test that variable.
set(KILN_NCCL_ROOT "" CACHE PATH
  "NCCL folder (include/nccl.h, lib/libnccl.so*); searched first")
include(${CMAKE_CURRENT_LIST_DIR}/SitePackages.cmake)
set(nccl_include_hints ${CUDAToolkit_INCLUDE_DIRS})
set(nccl_library_hints ${CUDAToolkit_LIBRARY_DIR})
foreach(root ${KILN_NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME})
  list(PREPEND nccl_include_hints ${root}/include)
  list(PREPEND nccl_library_hints ${root}/lib ${root}/lib64)
endforeach()
foreach(site ${KILN_SITE_PACKAGES})
  list(APPEND nccl_include_hints ${site}/nvidia/nccl/include)
  list(APPEND nccl_library_hints ${site}/nvidia/nccl/lib)
endforeach()
find_library(KILN_NCCL_LIBRARY NAMES nccl libnccl.so.2
  HINTS ${nccl_library_hints})
find_path(KILN_NCCL_INCLUDE_DIR nccl.h HINTS ${nccl_include_hints})
if(NOT KILN_NCCL_LIBRARY OR NOT KILN_NCCL_INCLUDE_DIR)
  set(KILN_HAVE_NCCL OFF)
  message(STATUS "Kiln NCCL communicator: OFF (libnccl or nccl.h not found "
    "in KILN_NCCL_ROOT, the CUDA toolkit, site-packages' nvidia/nccl or the "
    "system)")
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
if(KILN_HAVE_MPI)
  add_test(NAME comm-nccl-mpi-1
    COMMAND ${KILN_MPIRUN} 1 $<TARGET_FILE:kiln-comm-nccl-tests>
      --expect-host=mpi --expect-size=1)
  set_tests_properties(comm-nccl-mpi-1 PROPERTIES
    ENVIRONMENT "${KILN_COMM_TEST_ENV}" TIMEOUT 90 PROCESSORS 2
    RESOURCE_LOCK kiln-mpirun SKIP_RETURN_CODE 77)
endif()
