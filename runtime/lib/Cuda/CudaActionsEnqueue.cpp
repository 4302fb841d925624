//===- CudaActionsEnqueue.cpp - Device actions onto the streams -----------===//
//
// Loading generated CUBINs, and putting a built action list on the
// compute stream (each collective on its mesh axis's communicator's
// stream, joined by events), optionally with an event before each action
// for the trace.
// The same enqueueing runs eagerly and inside a CUDA graph capture.
//
//===----------------------------------------------------------------------===//

#include "CudaActions.h"

#include <cstring>

namespace kiln::runtime::cuda {

Expected<std::unique_ptr<LoadedModule>>
LoadedModule::load(const std::string &cubin) {
  std::unique_ptr<LoadedModule> m(new LoadedModule);
  if (cudaError_t e = cudaLibraryLoadData(&m->library, cubin.data(), nullptr,
                                          nullptr, 0, nullptr, nullptr, 0);
      e != cudaSuccess)
    return Error(cudaProblem("loading a CUBIN", e));
  return m;
}

LoadedModule::~LoadedModule() {
  if (library)
    cudaLibraryUnload(library);
}

Expected<cudaKernel_t> LoadedModule::kernel(const std::string &name) {
  auto it = kernels.find(name);
  if (it != kernels.end())
    return it->second;
  cudaKernel_t k = nullptr;
  if (cudaError_t e = cudaLibraryGetKernel(&k, library, name.c_str());
      e != cudaSuccess)
    return Error(cudaProblem("kernel '" + name + "'", e));
  kernels[name] = k;
  return k;
}

namespace {
/// A collective in flight: its handle on the communicator that started it.
struct Started {
  comm::NcclCommunicator *comm;
  comm::CommHandle handle;
};

Error enqueue(const Action &a, Gemms &gemms, const AxisComms &comms,
              cudaStream_t stream, std::map<int64_t, Started> &pending) {
  switch (a.kind) {
  case Action::Launch: {
    void *params[2] = {const_cast<uint64_t *>(a.args.data()),
                       const_cast<int *>(&a.extra)};
    if (cudaError_t e = cudaLaunchKernel(reinterpret_cast<const void *>(a.kernel),
                                         a.grid, a.block, params,
                                         a.shared, stream);
        e != cudaSuccess)
      return Error(cudaProblem("launching a kernel", e));
    return Error::success();
  }
  case Action::Memset:
    if (cudaError_t e = cudaMemsetAsync(a.dst, 0, a.bytes, stream);
        e != cudaSuccess)
      return Error(cudaProblem("cudaMemsetAsync", e));
    return Error::success();
  case Action::Copy:
    if (cudaError_t e = cudaMemcpyAsync(a.dst, a.src, a.bytes,
                                        cudaMemcpyDefault, stream);
        e != cudaSuccess)
      return Error(cudaProblem("cudaMemcpyAsync", e));
    return Error::success();
  case Action::Linear:
    switch (a.gemm) {
    case Action::Gemm::Forward:
      return gemms.linear(a.dtype, a.a, a.b, a.c, a.m, a.k, a.n, stream);
    case Action::Gemm::GradInput:
      return gemms.linearGradInput(a.dtype, a.a, a.b, a.c, a.m, a.n, a.k,
                                   stream);
    case Action::Gemm::GradWeight:
      return gemms.linearGradWeight(a.dtype, a.a, a.b, a.c, a.m, a.n, a.k,
                                    stream);
    }
    return Error::success();
  case Action::Scaled:
    return gemms.scaledMatmul(a.scaled, stream);
  case Action::Collective: {
    comm::NcclCommunicator *comm = comms.of(a.axis);
    if (!comm)
      return Error(std::string("a collective over ") + plan::axisName(a.axis) +
                   " in a run without a communicator for it");
    comm::CommHandle h;
    if (a.collective == plan::Op::AllGatherStart)
      h = comm->startAllGather(a.src, a.dst, a.count, a.element);
    else if (a.collective == plan::Op::ReduceScatterStart)
      h = comm->startReduceScatter(a.src, a.dst, a.count, a.element, a.reduce);
    else if (a.collective == plan::Op::SendRecvStart)
      h = comm->startSendRecv(a.src, a.dst, a.count, a.element, a.shift);
    else
      h = comm->startAllReduce(a.src, a.dst, a.count, a.element, a.reduce);
    pending[a.resultId] = {comm, h};
    return Error::success();
  }
  case Action::Wait: {
    auto it = pending.find(a.resultId);
    if (it == pending.end())
      return Error("waits for a collective that was not started");
    Error problem = it->second.comm->streamWait(it->second.handle, stream);
    pending.erase(it);
    return problem;
  }
  case Action::Sdpa:
    return runSdpa(*a.sdpa, a.args, stream);
  }
  return Error::success();
}
} // namespace

Error enqueueActions(const Plan &plan, const std::string &entry,
                     const std::vector<Action> &actions, Gemms &gemms,
                     const AxisComms &comms, cudaStream_t stream,
                     const std::vector<cudaEvent_t> *marks) {
  const PlanEntry *e = plan.entry(entry);
  std::map<int64_t, Started> pending;
  for (comm::NcclCommunicator *comm : {comms.dpShard, comms.tp})
    if (comm)
      comm->setProducerStream(stream);
  auto mark = [&](size_t i) -> Error {
    if (!marks)
      return Error::success();
    if (cudaError_t err = cudaEventRecord((*marks)[i], stream);
        err != cudaSuccess)
      return Error(cudaProblem("recording an event", err));
    return Error::success();
  };
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action &a = actions[i];
    Error problem = mark(i);
    if (!problem)
      problem = enqueue(a, gemms, comms, stream, pending);
    if (problem)
      return Error("op " + std::to_string(a.step) + " of " + entry + ", " +
                   describeStep(plan, e->steps[a.step]) + ": " +
                   problem.message());
  }
  return mark(actions.size());
}

const char *actionCategory(const Action &a) {
  switch (a.kind) {
  case Action::Linear:
    return "GEMM";
  case Action::Scaled:
    return "FP8 GEMM";
  case Action::Collective:
  case Action::Wait:
    return "collectives";
  case Action::Sdpa:
    return "attention";
  case Action::Memset:
  case Action::Copy:
    return "copies and memsets";
  case Action::Launch:
    break;
  }
  const std::string &k = a.kernelName;
  if (k.rfind("kiln_group", 0) == 0)
    return "fused groups";
  if (k.rfind("kiln_attention", 0) == 0)
    return "attention";
  if (k.rfind("kiln_adamw", 0) == 0)
    return "AdamW";
  if (k == "kiln_check_finite")
    return "numerics check";
  return "other op kernels";
}

} // namespace kiln::runtime::cuda
