# cuDNN's fused attention for the CUDA backend (lib/Cuda/CudnnAttention.h,
# docs/cuda.md "Attention"), included from runtime/CMakeLists.txt with the
# CUDA backend only. It needs:
#
# - cuDNN 9 (cudnn.h with cudnn_version.h, and libcudnn), searched in
#   KILN_CUDNN_ROOT (or $CUDNN_ROOT, $CUDNN_PATH), the CUDA toolkit, each
#   Python site-packages folder's nvidia/cudnn (the nvidia-cudnn-cu* wheel
#   PyTorch installs: include/, lib/libcudnn.so.9), then the system paths;
# - the cudnn-frontend headers (header-only; cudnn_frontend.h, version
#   KILN_CUDNN_FRONTEND_VERSION or later 1.x), searched in
#   KILN_CUDNN_FRONTEND_INCLUDE_DIR, where scripts/bootstrap unpacks the
#   pinned wheel (.deps/cudnn-frontend-<version>/include under the source
#   tree), each site-packages folder's include/ (pip's
#   nvidia-cudnn-frontend), then the system paths.
#
# With both, KILN_HAVE_CUDNN is ON: CudnnAttention.cpp is built and
# KilnRuntime links libcudnn, shared (it loads its engine libraries from
# its own folder; libcuda is still never linked). Without them,
# CudnnAttentionNone.cpp is built instead and every attention step runs on
# the hand-written kernels; either way configuring says which and why.
# -DKILN_ENABLE_CUDNN=OFF builds without cuDNN where it is found.

# The pin; scripts/bootstrap downloads the same version.
set(KILN_CUDNN_FRONTEND_VERSION 1.16.0)
option(KILN_ENABLE_CUDNN
  "Run attention through cuDNN's fused SDPA when cuDNN is found" ON)
set(KILN_CUDNN_ROOT "" CACHE PATH
  "cuDNN folder (include/cudnn.h, lib/libcudnn.so*); searched first")
set(KILN_CUDNN_FRONTEND_INCLUDE_DIR "" CACHE PATH
  "cudnn-frontend include folder (cudnn_frontend.h); searched first")

# Python's site-packages folders (KILN_SITE_PACKAGES).
include(${CMAKE_CURRENT_LIST_DIR}/SitePackages.cmake)

set(roots ${KILN_CUDNN_ROOT} $ENV{CUDNN_ROOT} $ENV{CUDNN_PATH})
set(include_hints ${CUDAToolkit_INCLUDE_DIRS})
set(library_hints ${CUDAToolkit_LIBRARY_DIR})
foreach(root ${roots})
  list(PREPEND include_hints ${root}/include)
  list(PREPEND library_hints ${root}/lib ${root}/lib64)
endforeach()
set(frontend_hints ${KILN_CUDNN_FRONTEND_INCLUDE_DIR}
  ${CMAKE_SOURCE_DIR}/.deps/cudnn-frontend-${KILN_CUDNN_FRONTEND_VERSION}/include)
foreach(site ${KILN_SITE_PACKAGES})
  list(APPEND include_hints ${site}/nvidia/cudnn/include)
  list(APPEND library_hints ${site}/nvidia/cudnn/lib)
  list(APPEND frontend_hints ${site}/include)
endforeach()

find_path(KILN_CUDNN_INCLUDE_DIR cudnn_version.h HINTS ${include_hints})
# The wheels ship libcudnn.so.9 only, without the unversioned link.
find_library(KILN_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9
  HINTS ${library_hints})
find_path(KILN_CUDNN_FRONTEND_DIR cudnn_frontend.h HINTS ${frontend_hints})

set(KILN_HAVE_CUDNN OFF)
set(why "")
if(NOT KILN_ENABLE_CUDNN)
  set(why "KILN_ENABLE_CUDNN is OFF")
elseif(NOT EXISTS "${KILN_CUDNN_INCLUDE_DIR}/cudnn.h" OR
       NOT EXISTS "${KILN_CUDNN_INCLUDE_DIR}/cudnn_version.h")
  set(why "cudnn.h not found (set KILN_CUDNN_ROOT)")
elseif(NOT EXISTS "${KILN_CUDNN_LIBRARY}")
  set(why "libcudnn not found (set KILN_CUDNN_ROOT)")
elseif(NOT EXISTS "${KILN_CUDNN_FRONTEND_DIR}/cudnn_frontend.h" OR
       NOT EXISTS "${KILN_CUDNN_FRONTEND_DIR}/cudnn_frontend_version.h")
  set(why "cudnn_frontend.h not found (run scripts/bootstrap, or set "
    "KILN_CUDNN_FRONTEND_INCLUDE_DIR)")
else()
  file(STRINGS ${KILN_CUDNN_INCLUDE_DIR}/cudnn_version.h cudnn_lines
    REGEX "^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
  string(REGEX REPLACE ".*CUDNN_MAJOR ([0-9]+).*" "\\1" cudnn_major
    "${cudnn_lines}")
  string(REGEX REPLACE ".*CUDNN_MINOR ([0-9]+).*" "\\1" cudnn_minor
    "${cudnn_lines}")
  string(REGEX REPLACE ".*CUDNN_PATCHLEVEL ([0-9]+).*" "\\1" cudnn_patch
    "${cudnn_lines}")
  file(STRINGS ${KILN_CUDNN_FRONTEND_DIR}/cudnn_frontend_version.h fe_lines
    REGEX "^#define CUDNN_FRONTEND_(MAJOR|MINOR|PATCH)_VERSION ")
  string(REGEX REPLACE ".*MAJOR_VERSION ([0-9]+).*" "\\1" fe_major
    "${fe_lines}")
  string(REGEX REPLACE ".*MINOR_VERSION ([0-9]+).*" "\\1" fe_minor
    "${fe_lines}")
  string(REGEX REPLACE ".*PATCH_VERSION ([0-9]+).*" "\\1" fe_patch
    "${fe_lines}")
  set(cudnn_version "${cudnn_major}.${cudnn_minor}.${cudnn_patch}")
  set(fe_version "${fe_major}.${fe_minor}.${fe_patch}")
  if(NOT cudnn_major EQUAL 9)
    set(why "cuDNN ${cudnn_version} in ${KILN_CUDNN_INCLUDE_DIR}; Kiln "
      "takes cuDNN 9")
  elseif(NOT fe_major EQUAL 1 OR
         fe_version VERSION_LESS KILN_CUDNN_FRONTEND_VERSION)
    set(why "cudnn-frontend ${fe_version} in ${KILN_CUDNN_FRONTEND_DIR}; "
      "Kiln takes 1.x from ${KILN_CUDNN_FRONTEND_VERSION}")
  else()
    set(KILN_HAVE_CUDNN ON)
  endif()
endif()

if(NOT KILN_HAVE_CUDNN)
  string(CONCAT why ${why})
  message(STATUS "Kiln cuDNN attention: OFF (${why}); attention runs on the "
    "hand-written CUDA kernels")
  target_sources(KilnRuntime PRIVATE lib/Cuda/CudnnAttentionNone.cpp)
  return()
endif()
message(STATUS "Kiln cuDNN attention: cuDNN ${cudnn_version} "
  "(${KILN_CUDNN_LIBRARY}), cudnn-frontend ${fe_version} "
  "(${KILN_CUDNN_FRONTEND_DIR})")

target_sources(KilnRuntime PRIVATE lib/Cuda/CudnnAttention.cpp)
# The headers only where they are included.
set_property(SOURCE lib/Cuda/CudnnAttention.cpp APPEND PROPERTY
  INCLUDE_DIRECTORIES ${KILN_CUDNN_FRONTEND_DIR} ${KILN_CUDNN_INCLUDE_DIR})
target_link_libraries(KilnRuntime PRIVATE ${KILN_CUDNN_LIBRARY})
# The op kernel check compares the cuDNN path with the CPU backend too.
target_compile_definitions(kiln-op-kernel-check PRIVATE KILN_HAVE_CUDNN=1)

# The graphs' descriptions against cudnn-frontend's own validation, on the
# host: the check stands in for the device's properties, so no GPU is
# needed (tests/Cuda/CudnnGraphCheck.cpp).
add_executable(kiln-cudnn-graph-check tests/Cuda/CudnnGraphCheck.cpp)
target_include_directories(kiln-cudnn-graph-check PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/lib/Cuda ${KILN_CUDNN_INCLUDE_DIR})
target_link_libraries(kiln-cudnn-graph-check PRIVATE KilnRuntime
  ${KILN_CUDNN_LIBRARY} CUDA::cudart)
add_test(NAME cuda-cudnn-graphs COMMAND kiln-cudnn-graph-check)
