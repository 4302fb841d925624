//===- CudaExecutorMemory.cpp - The CUDA executor's memory and states -----===//
//
// prepare() sets up the device once (stream, cuBLASLt, the op kernels'
// module, the numerics flag) and allocates everything the plan needs in a
// few buffers whose addresses never change: the arena, the states, the
// small values and the scratch on the device, pinned host memory for the
// inputs and outputs. The states go in and out through the host layout of
// StateLayout.h, so they are the CPU backend's.
//
//===----------------------------------------------------------------------===//

#include "CudaExecutorState.h"

#include "kiln/Runtime/Cuda/KernelCompiler.h"
#include "kiln/Runtime/Cuda/OpKernels.h"
#include "kiln/Runtime/MemoryCheck.h"

#include <algorithm>

namespace kiln::runtime::cuda {

namespace {
int64_t aligned(int64_t n) { return (n + 255) / 256 * 256; }
} // namespace

Error CudaExecutor::State::prepare() {
  if (prepared)
    return Error::success();
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess)
    return Error(cudaProblem("selecting GPU " + std::to_string(device), e));
  if (cudaError_t e = cudaGetDeviceProperties(&prop, device); e != cudaSuccess)
    return Error(cudaProblem("reading the device's properties", e));
  arch = kernelArch(prop.major, prop.minor);
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      e != cudaSuccess)
    return Error(cudaProblem("creating a stream", e));
  Expected<std::unique_ptr<Gemms>> created = Gemms::create();
  if (!created)
    return created.takeError();
  gemms = *std::move(created);
  if (Error e = gemms->reserveFallbackScratch(fallbackScratchBytes(plan)))
    return e;
  Expected<int64_t> needed = scratchBytesNeeded(plan, shardPosition);
  if (!needed)
    return needed.takeError();
  scratchBytes = *needed;
  attention = prepareAttention(plan, stream); // says which attention runs
  if (Error problem = allocate())
    return problem;
  Expected<CompiledKernel> cubin =
      compileKernel(opKernelLibrarySource(), arch, defaultKernelCacheDir(),
                    Arithmetic::Exact);
  if (!cubin)
    return Error("NVRTC, compiling the op kernels: " + cubin.error().message());
  Expected<std::unique_ptr<LoadedModule>> loaded =
      LoadedModule::load(cubin->cubin);
  if (!loaded)
    return loaded.takeError();
  ops = *std::move(loaded);
  if (cudaError_t e = cudaMalloc(&numericsFlag, sizeof(uint64_t));
      e != cudaSuccess)
    return Error(cudaProblem("allocating the numerics flag", e));
  if (cudaError_t e = cudaMallocHost(&numericsHost, sizeof(uint64_t));
      e != cudaSuccess)
    return Error(cudaProblem("allocating the numerics flag's host copy", e));
  prepared = true;
  noteMemory();
  return Error::success();
}

namespace {
/// What is allocated after the memory check, kept free at it. Estimates,
/// until a GPU run measures them (docs/cuda.md, "The executor"): 256 MiB
/// for the op kernel library, the group kernels' modules, the CUDA graphs'
/// executable copies and cuDNN's plans; 1 GiB more for each mesh axis of
/// more than one rank (its NCCL communicator runs the axis's collectives)
/// for NCCL's channel buffers (its default 4 MiB Simple and LL128 buffers
/// per channel and peer, over up to 32 channels on NVLink).
MemoryReserve deviceReserve(const Plan &plan) {
  MemoryReserve r;
  r.bytes = int64_t(256) << 20;
  r.what = "kernel modules and CUDA graphs";
  int64_t axes = (plan.mesh.dpShard > 1) + (plan.mesh.tp > 1);
  if (axes > 0) {
    r.bytes += axes << 30;
    r.what +=
        axes > 1 ? ", and NCCL's buffers (two axes)" : ", and NCCL's buffers";
  }
  r.what += " (allocated after this check)";
  return r;
}
} // namespace

Error CudaExecutor::State::allocate() {
  // Constants and per-run inputs share one small buffer; so do their pinned
  // host copies, with every entry's outputs.
  int64_t smallBytes = 0, pinnedBytes = 0, stateBytes = 0;
  for (const PlanValue &v : plan.values) {
    if (v.kind == PlanValue::Const || v.kind == PlanValue::Input)
      smallBytes += aligned(std::max<int64_t>(v.bytes(), 8));
    if (v.kind == PlanValue::Input)
      pinnedBytes += aligned(std::max<int64_t>(v.bytes(), 8));
    if (v.kind == PlanValue::State)
      stateBytes += aligned(v.bytes());
  }
  for (const auto &[name, entry] : plan.entries)
    for (const auto &[out, id] : entry.outputs)
      pinnedBytes += aligned(plan.values[id].bytes());
  int64_t attentionBytes = attention ? attention->deviceBytes() : 0;
  int64_t backendBytes =
      smallBytes + scratchBytes + gemms->deviceBytes() + attentionBytes;
  predicted = predictedDeviceBytes(plan, backendBytes);

  size_t freeBytes = 0, totalBytes = 0;
  if (cudaError_t e = cudaMemGetInfo(&freeBytes, &totalBytes); e != cudaSuccess)
    return Error(cudaProblem("cudaMemGetInfo", e));
  std::string deviceName =
      "GPU " + std::to_string(device) + " (" + prop.name + ")";
  if (Error why = memoryShortfall(plan, backendBytes,
                                  static_cast<int64_t>(freeBytes), deviceName,
                                  kDeviceBackendBuffers, deviceReserve(plan)))
    return why;

  auto grab = [&](char *&p, int64_t bytes, const char *what) -> Error {
    if (cudaError_t e = cudaMalloc(&p, std::max<int64_t>(bytes, 256));
        e != cudaSuccess)
      return Error(cudaProblem(std::string("allocating ") + what + " (" +
                                   formatBytes(bytes) + ")",
                               e));
    allocated += std::max<int64_t>(bytes, 256);
    return Error::success();
  };
  if (Error p = grab(arena, plan.arenaBytes, "the arena"))
    return p;
  if (Error p = grab(states, stateBytes, "the state"))
    return p;
  if (Error p = grab(small, smallBytes, "inputs and constants"))
    return p;
  if (Error p = grab(scratch, scratchBytes, "scratch"))
    return p;
  allocated += gemms->deviceBytes() + attentionBytes;
  if (cudaError_t e = cudaMallocHost(&pinned, std::max<int64_t>(pinnedBytes, 256));
      e != cudaSuccess)
    return Error(cudaProblem("allocating pinned host memory", e));

  int64_t stateAt = 0, smallAt = 0, pinnedAt_ = 0;
  std::vector<float> constants;
  for (const PlanValue &v : plan.values) {
    if (v.kind == PlanValue::State) {
      at[v.id] = states + stateAt;
      stateAt += aligned(v.bytes());
    } else if (v.kind == PlanValue::Const || v.kind == PlanValue::Input) {
      at[v.id] = small + smallAt;
      smallAt += aligned(std::max<int64_t>(v.bytes(), 8));
      if (v.kind == PlanValue::Input) {
        pinnedAt[v.id] = pinned + pinnedAt_;
        pinnedAt_ += aligned(std::max<int64_t>(v.bytes(), 8));
      } else {
        float x = static_cast<float>(v.constValue);
        std::vector<float> fill(std::max<int64_t>(v.numElements(), 1), x);
        if (Error e = copyOnStream(
                {{at[v.id], fill.data(),
                  static_cast<int64_t>(fill.size() * sizeof(float)),
                  "a constant"}},
                cudaMemcpyHostToDevice))
          return e;
      }
    }
  }
  for (const auto &[name, entry] : plan.entries)
    for (const auto &[out, id] : entry.outputs)
      if (!pinnedAt.count(id)) {
        pinnedAt[id] = pinned + pinnedAt_;
        pinnedAt_ += aligned(plan.values[id].bytes());
      }
  return Error::success();
}

Error CudaExecutor::State::copyOnStream(const std::vector<Transfer> &transfers,
                                        cudaMemcpyKind kind) {
  const char *verb =
      kind == cudaMemcpyHostToDevice ? "uploading " : "downloading ";
  // Every copy is queued, then one sync: the host buffers outlive it.
  for (const Transfer &t : transfers)
    if (cudaError_t e = cudaMemcpyAsync(
            t.dst, t.src, static_cast<size_t>(t.bytes), kind, stream);
        e != cudaSuccess)
      return Error(cudaProblem(verb + t.what, e));
  if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess)
    return Error(cudaProblem(
        verb + (transfers.size() == 1 ? transfers[0].what : "the state"), e));
  return Error::success();
}

Error CudaExecutor::State::upload(const HostStates &host) {
  std::vector<Transfer> transfers;
  for (const auto &[id, data] : host)
    transfers.push_back({at.at(id), data.data(),
                         static_cast<int64_t>(data.size() * sizeof(float)),
                         "'" + plan.values[id].name + "'"});
  return copyOnStream(transfers, cudaMemcpyHostToDevice);
}

Error CudaExecutor::State::download(HostStates &host) {
  host = zeroStates(plan);
  std::vector<Transfer> transfers;
  for (auto &[id, data] : host)
    transfers.push_back({data.data(), at.at(id),
                         static_cast<int64_t>(data.size() * sizeof(float)),
                         "'" + plan.values[id].name + "'"});
  return copyOnStream(transfers, cudaMemcpyDeviceToHost);
}

Error CudaExecutor::initialize(uint64_t seed) {
  if (Error problem = s->prepare())
    return problem;
  HostStates host = zeroStates(s->plan);
  initializeStates(s->plan, s->shardPosition, seed, host);
  return s->upload(host);
}

Expected<std::vector<FloatTensor>> CudaExecutor::unshardedState() {
  if (Error problem = s->prepare())
    return problem;
  HostStates host;
  if (Error problem = s->download(host))
    return problem;
  return unshardedStates(s->plan, host, s->hostDpShard, s->hostTp);
}

Error CudaExecutor::setUnshardedState(
    const std::map<std::string, const FloatTensor *> &byName) {
  if (Error problem = s->prepare())
    return problem;
  HostStates host = zeroStates(s->plan);
  if (Error problem =
          setUnshardedStates(s->plan, s->shardPosition, byName, host))
    return problem;
  return s->upload(host);
}

void CudaExecutor::State::noteMemory() {
  size_t freeBytes = 0, totalBytes = 0;
  if (cudaMemGetInfo(&freeBytes, &totalBytes) == cudaSuccess)
    usedPeak = std::max<int64_t>(usedPeak,
                                 static_cast<int64_t>(totalBytes - freeBytes));
}

} // namespace kiln::runtime::cuda
