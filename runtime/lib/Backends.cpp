//===- Backends.cpp - The backends behind one interface -------------------===//
//
// executorBackends and createExecutor (declared in Executor.h): the one
// runtime file that names both backends, above them both.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Executor.h"
#include "kiln/Runtime/Cpu/CpuExecutor.h"
#ifdef KILN_HAVE_CUDA
#include "kiln/Runtime/Cuda/CudaExecutor.h"
#endif

namespace kiln::runtime {

std::vector<std::string> executorBackends() {
#ifdef KILN_HAVE_CUDA
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

Expected<std::unique_ptr<Executor>>
createExecutor(const Plan &plan, const std::string &backend,
               const ExecutorOptions &options) {
  if (backend == "cpu")
    return CpuExecutor::create(plan);
  if (backend == "cuda") {
#ifdef KILN_HAVE_CUDA
    Expected<std::unique_ptr<cuda::CudaExecutor>> exec =
        cuda::CudaExecutor::create(plan);
    if (exec)
      (*exec)->setGraphs(options.cudaGraphs);
    return exec;
#else
    (void)options;
    return Error("this build has no CUDA backend (the CUDA toolkit was not "
                 "found when it was configured)");
#endif
  }
  return Error("unknown backend '" + backend + "' (expected cpu or cuda)");
}

} // namespace kiln::runtime
