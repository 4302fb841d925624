# The runtime's host libraries, included first from runtime/CMakeLists.txt.
# Each is optional, so that the runtime builds where only a compiler, CMake,
# ninja and the CUDA toolkit are (a GPU machine: scripts/gpu-test,
# docs/cuda.md "GPU tests"); configuring prints one line for each:
#
# - OpenBLAS (KILN_USE_OPENBLAS, ON): the CPU backend's GEMMs. Without it
#   they are Kiln's portable GEMM (lib/Cpu/Gemm.h): correct f32, the same
#   bits for every thread count, several times slower.
# - MPI (KILN_USE_MPI, ON): the MPI communicator and its tests. Without it
#   KilnComm has the local communicator only (lib/Comm/MpiCommunicatorNone.cpp:
#   a process started by mpirun gets an error), and the tests that need
#   mpirun are not built or registered.
# - GoogleTest: the installed one (find_package), else built here from the
#   sources in KILN_GTEST_SOURCE_DIR (default .deps/googletest, which
#   `scripts/gpu-test --prepare` copies from Debian's /usr/src/googletest).
#   KILN_GTEST_FROM_SOURCE=ON takes the sources even where one is installed.
# - protobuf (KILN_USE_PROTOBUF, ON): kiln train's TensorBoard event files
#   (lib/Train/TensorBoard.cpp). Without it `metrics.enable_tensorboard`
#   is an error saying the build has no writer.
#
# scripts/gpu-test's run on this machine forces all three off to stand in
# for a GPU machine (KILN_GPU_TEST_CMAKE_ARGS there), and protobuf with them.
option(KILN_USE_OPENBLAS
  "CPU backend GEMMs on OpenBLAS when found (else Kiln's portable GEMM)" ON)
option(KILN_USE_MPI "Build the MPI communicator when MPI is found" ON)
option(KILN_USE_PROTOBUF
  "Write TensorBoard event files through protobuf when it is found" ON)
option(KILN_GTEST_FROM_SOURCE
  "Build GoogleTest from KILN_GTEST_SOURCE_DIR even if one is installed" OFF)
set(KILN_GTEST_SOURCE_DIR "${CMAKE_SOURCE_DIR}/.deps/googletest" CACHE PATH
  "GoogleTest sources (a copy of /usr/src/googletest), used when no installed GoogleTest is found")

# --- OpenBLAS ---------------------------------------------------------------
set(KILN_HAVE_OPENBLAS OFF)
if(NOT KILN_USE_OPENBLAS)
  message(STATUS "Kiln CPU GEMM: portable (KILN_USE_OPENBLAS is OFF)")
else()
  find_library(OPENBLAS_LIBRARY openblas)
  find_path(OPENBLAS_INCLUDE_DIR cblas.h PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas)
  if(OPENBLAS_LIBRARY AND OPENBLAS_INCLUDE_DIR)
    set(KILN_HAVE_OPENBLAS ON)
    message(STATUS "Kiln CPU GEMM: OpenBLAS (${OPENBLAS_LIBRARY})")
  else()
    message(STATUS "Kiln CPU GEMM: portable (OpenBLAS not found: libopenblas "
      "or cblas.h; Debian's libopenblas-dev)")
  endif()
endif()

# --- MPI --------------------------------------------------------------------
set(KILN_HAVE_MPI OFF)
if(NOT KILN_USE_MPI)
  message(STATUS "Kiln MPI communicator: OFF (KILN_USE_MPI is OFF); local "
    "communicator only, MPI tests not built")
else()
  set(MPI_CXX_SKIP_MPICXX ON) # the C API only, no MPI C++ bindings
  find_package(MPI COMPONENTS CXX)
  if(MPI_CXX_FOUND)
    set(KILN_HAVE_MPI ON)
    message(STATUS "Kiln MPI communicator: MPI ${MPI_CXX_VERSION} "
      "(${MPIEXEC_EXECUTABLE})")
  else()
    message(STATUS "Kiln MPI communicator: OFF (MPI not found; Debian's "
      "libopenmpi-dev); local communicator only, MPI tests not built")
  endif()
endif()

# --- protobuf ---------------------------------------------------------------
set(KILN_HAVE_PROTOBUF OFF)
if(NOT KILN_USE_PROTOBUF)
  message(STATUS "Kiln TensorBoard writer: OFF (KILN_USE_PROTOBUF is OFF)")
else()
  find_package(Protobuf QUIET)
  if(Protobuf_FOUND AND Protobuf_PROTOC_EXECUTABLE)
    set(KILN_HAVE_PROTOBUF ON)
    message(STATUS "Kiln TensorBoard writer: protobuf ${Protobuf_VERSION}")
  else()
    message(STATUS "Kiln TensorBoard writer: OFF (protobuf not found; "
      "Debian's libprotobuf-dev protobuf-compiler)")
  endif()
endif()

# --- GoogleTest -------------------------------------------------------------
if(NOT KILN_GTEST_FROM_SOURCE)
  find_package(GTest QUIET)
endif()
if(NOT KILN_GTEST_FROM_SOURCE AND TARGET GTest::gtest AND
   TARGET GTest::gtest_main)
  message(STATUS "Kiln GoogleTest: installed (${GTest_DIR})")
elseif(EXISTS "${KILN_GTEST_SOURCE_DIR}/CMakeLists.txt")
  # GoogleTest's own options (policy CMP0077: plain variables set them):
  # no gmock, nothing installed, built only as the tests need it.
  set(BUILD_GMOCK OFF)
  set(INSTALL_GTEST OFF)
  add_subdirectory("${KILN_GTEST_SOURCE_DIR}"
    "${CMAKE_BINARY_DIR}/googletest" EXCLUDE_FROM_ALL)
  message(STATUS "Kiln GoogleTest: built from ${KILN_GTEST_SOURCE_DIR}")
else()
  message(FATAL_ERROR "GoogleTest: no installed one (Debian's libgtest-dev) "
    "and no sources in KILN_GTEST_SOURCE_DIR=${KILN_GTEST_SOURCE_DIR} "
    "(`scripts/gpu-test --prepare` copies /usr/src/googletest there)")
endif()
