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
  std::string error;
  gemms = Gemms::create(error);
  if (!gemms)
    return Error(error);
  scratchBytes = scratchBytesNeeded(plan, rankIndex, error);
  if (scratchBytes < 0)
    return Error(error);
  attention = prepareAttention(plan); // says which attention runs
  if (Error problem = allocate())
    return problem;
  std::optional<CompiledKernel> cubin = compileKernel(
      opKernelLibrarySource(), arch, defaultKernelCacheDir(), error);
  if (!cubin)
    return Error("NVRTC, compiling the op kernels: " + error);
  ops = LoadedModule::load(cubin->cubin, error);
  if (!ops)
    return Error(error);
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
                                  static_cast<int64_t>(freeBytes), deviceName))
    return why;

  auto grab = [&](char *&p, int64_t bytes, const char *what) -> std::string {
    if (cudaError_t e = cudaMalloc(&p, std::max<int64_t>(bytes, 256));
        e != cudaSuccess)
      return cudaProblem(std::string("allocating ") + what + " (" +
                             formatBytes(bytes) + ")",
                         e);
    allocated += std::max<int64_t>(bytes, 256);
    return "";
  };
  if (std::string p = grab(arena, plan.arenaBytes, "the arena"); !p.empty())
    return Error(p);
  if (std::string p = grab(states, stateBytes, "the state"); !p.empty())
    return Error(p);
  if (std::string p = grab(small, smallBytes, "inputs and constants");
      !p.empty())
    return Error(p);
  if (std::string p = grab(scratch, scratchBytes, "scratch"); !p.empty())
    return Error(p);
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
        if (cudaError_t e = cudaMemcpy(at[v.id], fill.data(),
                                       fill.size() * sizeof(float),
                                       cudaMemcpyHostToDevice);
            e != cudaSuccess)
          return Error(cudaProblem("uploading a constant", e));
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

Error CudaExecutor::State::upload(const HostStates &host) {
  for (const auto &[id, data] : host)
    if (cudaError_t e = cudaMemcpy(at.at(id), data.data(),
                                   data.size() * sizeof(float),
                                   cudaMemcpyHostToDevice);
        e != cudaSuccess)
      return Error(cudaProblem("uploading '" + plan.values[id].name + "'", e));
  return Error::success();
}

Error CudaExecutor::State::download(HostStates &host) {
  host = zeroStates(plan);
  for (auto &[id, data] : host)
    if (cudaError_t e = cudaMemcpy(data.data(), at.at(id),
                                   data.size() * sizeof(float),
                                   cudaMemcpyDeviceToHost);
        e != cudaSuccess)
      return Error(
          cudaProblem("downloading '" + plan.values[id].name + "'", e));
  return Error::success();
}

Error CudaExecutor::initialize(uint64_t seed) {
  if (Error problem = s->prepare())
    return problem;
  HostStates host = zeroStates(s->plan);
  initializeStates(s->plan, s->rankIndex, seed, host);
  return s->upload(host);
}

Expected<std::vector<FloatTensor>> CudaExecutor::unshardedState() {
  if (Error problem = s->prepare())
 return problem;
  HostStates host;
  if (Error problem = s->download(host))
 return problem;
  return unshardedStates(s->plan, host, s->host);
}

Error CudaExecutor::setUnshardedState(
    const std::map<std::string, const FloatTensor *> &byName) {
  if (Error problem = s->prepare())
    return problem;
  HostStates host = zeroStates(s->plan);
  if (Error problem = setUnshardedStates(s->plan, s->rankIndex, byName, host))
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
