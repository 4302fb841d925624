//===- CudaExecutor.cpp - Runs a plan on one GPU per rank -----------------===//
//
// Creating the executor (which ops and values the backend takes), its
// settings, the communicator (NCCL over the host's MPI for several ranks),
// and what it reports. Memory: CudaExecutorMemory.cpp; running an entry:
// CudaExecutorRun.cpp.
//
//===----------------------------------------------------------------------===//

#include "CudaExecutorState.h"

#include "kiln/Runtime/Cuda/OpKernels.h"
#include "kiln/Runtime/MemoryCheck.h"

#include <cstdio>

namespace kiln::runtime::cuda {

namespace {
/// Which ops the backend runs outside fused groups: init, the GEMMs, the
/// collectives and their waits, and the op kernels.
bool runsOp(plan::Op op) {
  switch (plan::category(op)) {
  case plan::Category::Init:
  case plan::Category::Collective:
  case plan::Category::Wait:
    return true;
  case plan::Category::Library:
  case plan::Category::ShardCast:
    return isGemm(op) || isKernelOp(op);
  case plan::Category::Fused:
  case plan::Category::GroupOnly:
    return false;
  }
  return false;
}
} // namespace

void CudaExecutor::State::dropEntries() {
  for (auto &[name, e] : entries) {
    if (e.graph)
      cudaGraphExecDestroy(e.graph);
    for (cudaEvent_t m : e.marks)
      cudaEventDestroy(m);
  }
  entries.clear();
}

CudaExecutor::State::~State() {
  dropEntries();
  groups.clear();
  ops.reset();
  gemms.reset();
  attention.reset();
  for (void *p : {static_cast<void *>(arena), static_cast<void *>(states),
                  static_cast<void *>(small), static_cast<void *>(scratch),
                  static_cast<void *>(numericsFlag)})
    if (p)
      cudaFree(p);
  for (void *p : {static_cast<void *>(pinned),
                  static_cast<void *>(numericsHost)})
    if (p)
      cudaFreeHost(p);
  if (stream)
    cudaStreamDestroy(stream);
  // The axes split from the world's communicator go first.
  deviceAxes = {};
  axes = {};
  nccl.reset();
}

Expected<std::unique_ptr<CudaExecutor>> CudaExecutor::create(const Plan &plan) {
  if (!plan.entry("init")) {
    return Error("the plan has no 'init' entry");
  }
  for (const auto &[name, entry] : plan.entries)
    for (const PlanStep &step : entry.steps)
      if (!step.group && !runsOp(step.kind)) {
        return Error("the CUDA backend cannot run op '" + step.op + "' (" +
                     name + ", " + step.loc + ")");
      }
  for (const PlanValue &v : plan.values) {
    if (v.kind == PlanValue::State && v.dtype != DType::F32) {
      return Error("state '" + v.name + "' is " + dtypeName(v.dtype) +
                   "; the CUDA backend keeps state in f32");
    }
    if (v.kind == PlanValue::Const && v.dtype != DType::F32) {
      return Error(std::string("a ") + dtypeName(v.dtype) +
                   " constant; the CUDA backend takes f32 constants");
    }
  }
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    return Error(std::string("no usable CUDA device (") +
                 cudaGetErrorString(e) + ")");
  }
  if (count == 0) {
    return Error("no CUDA device");
  }
  return std::unique_ptr<CudaExecutor>(
      new CudaExecutor(std::make_unique<State>(plan)));
}

CudaExecutor::CudaExecutor(std::unique_ptr<State> state)
    : s(std::move(state)) {}
CudaExecutor::~CudaExecutor() = default;

const Plan &CudaExecutor::plan() const { return s->plan; }
int CudaExecutor::rank() const { return s->rankIndex; }
void CudaExecutor::setTrace(Trace *trace) { s->trace = trace; }
void CudaExecutor::setGraphs(bool on) { s->graphs = on; }

void CudaExecutor::setCheckNumerics(bool on) {
  if (s->checkNumerics == on)
    return;
  s->checkNumerics = on;
  s->dropEntries(); // their actions have the checks, or lack them
}
int64_t CudaExecutor::allocatedBytes() const { return s->allocated; }

CudaExecutor::Memory CudaExecutor::memory() const {
  return {s->predicted, s->allocated, s->usedPeak};
}

Error CudaExecutor::setCommunicator(comm::Communicator *c) {
  if (Error wrong = checkRunFits(s->plan, c))
    return wrong;
  if (s->prepared)
    return Error("the communicator is set before the executor's first use");
  const PlanMesh &mesh = s->plan.mesh;
  // Pipeline parallel's transfers (pipe_send_start, pipe_recv_start) need
  // NCCL's point-to-point calls, not wired in yet.
  if (mesh.pp > 1)
    return Error("pipeline parallel (a plan with pp " +
                 std::to_string(mesh.pp) +
                 ") is not implemented on the CUDA backend yet: train it "
                 "with --backend cpu (docs/pp.md)");
  s->host = c;
  s->rankIndex = c ? c->rank() : 0;
  s->shardPosition =
      static_cast<int>(mesh.axisIndex(plan::Axis::DpShard, s->rankIndex));
  s->hostDpShard = s->hostTp = c;
  if (s->plan.ranks > 1) {
    // One rank per GPU; NCCL picks this rank's device and sets it.
#ifdef KILN_HAVE_NCCL
    // The collective deadline of the run (comm.train_timeout_seconds; 0
    // waits forever), as the MPI communicator keeps it.
    Expected<std::unique_ptr<comm::NcclCommunicator>> nccl =
        comm::createNcclCommunicator(
            *c, static_cast<double>(s->plan.training.commTimeoutSeconds));
    if (!nccl)
      return nccl.takeError();
    s->nccl = *std::move(nccl);
    s->device = s->nccl->device();
    // The mesh's axes, as the CPU executor makes them from its host
    // communicator: with tp = 1 the dp_shard axis is the world's NCCL
    // communicator and nothing is split.
    Expected<comm::AxisCommunicators> axes =
        comm::splitMesh(*s->nccl, 1, mesh.dpShard, mesh.tp);
    if (!axes)
      return axes.takeError();
    s->axes = *std::move(axes);
    auto place = [](comm::Communicator *axis, comm::NcclCommunicator *&device,
                    comm::Communicator *&host) -> Error {
      host = axis; // an axis of one rank: a local communicator
      if (axis->size() == 1)
        return Error::success();
      device = dynamic_cast<comm::NcclCommunicator *>(axis);
      if (!device)
        return Error(std::string("a mesh axis of ") +
                     std::to_string(axis->size()) + " ranks on a " +
                     axis->backendName() + " communicator, not NCCL");
      host = &device->host();
      return Error::success();
    };
    if (Error e = place(s->axes.dpShard, s->deviceAxes.dpShard, s->hostDpShard))
      return e;
    if (Error e = place(s->axes.tp, s->deviceAxes.tp, s->hostTp))
      return e;
#else
    return Error("this build has no NCCL (libnccl was not found when it was "
                 "configured): the CUDA backend runs one rank only");
#endif
  }
  return s->prepare();
}

std::string CudaExecutor::memoryReport() const {
  if (!s->prepared)
    return "";
  return "device memory: " + formatBytes(s->predicted) + " predicted, " +
         formatBytes(s->allocated) + " allocated by Kiln, " +
         formatBytes(s->usedPeak) + " in use on the device at most "
         "(cudaMemGetInfo, CUDA's own memory included)";
}

int64_t CudaExecutor::peakMemoryBytes() const {
  return s->prepared ? s->usedPeak : 0;
}

std::string CudaExecutor::describe() const {
  char text[256];
  if (!s->prepared)
    return "CUDA";
  std::snprintf(text, sizeof text,
                "CUDA, GPU %d (%s, %s), %s predicted, %s allocated%s", s->device,
                s->prop.name, s->arch.c_str(),
                formatBytes(s->predicted).c_str(),
                formatBytes(s->allocated).c_str(),
                s->graphs ? ", CUDA graphs" : "");
  return text;
}

} // namespace kiln::runtime::cuda
