//===- OpKernelCudnn.cpp - Attention through cuDNN for the op check -------===//
//
// kiln-op-kernel-check --device gpu runs each attention and attention_grad
// step a second time, through cuDNN's fused SDPA as the executor does
// (CudnnAttention.h: the step's SdpaConfig, its cached graph, the shared
// workspace, runSdpa), and compares it with the CPU backend too. Built
// into the check with or without cuDNN; without it every step is refused.
//
//===----------------------------------------------------------------------===//

#include "AttentionPlan.h"
#include "OpKernelDevices.h"

#include <cmath>
#include <map>

#ifdef KILN_HAVE_CUDNN
#include "../../lib/Cuda/CudnnAttention.h"
#include <cuda_runtime.h>
#endif

namespace kiln::runtime::opcheck {

Plan cudnnAttentionPlan(int64_t batch, int64_t seq, int64_t heads,
                        int64_t kvHeads, int64_t dim, bool causal) {
  return checks::attentionPlan(
      {batch, seq, heads, kvHeads, dim}, DType::BF16, causal,
      1.0 / std::sqrt(static_cast<double>(dim)), DType::BF16, "attention");
}

#ifdef KILN_HAVE_CUDNN
std::string runCudnnAttention(const Plan &plan, const PlanStep &step,
                              const std::vector<std::vector<uint8_t>> &in,
                              std::vector<std::vector<uint8_t>> &out,
                              bool &refused) {
  // One handle and graph cache for the whole check, as in an executor.
  static std::unique_ptr<cuda::CudnnAttention> attention;
  static std::string unavailable;
  refused = true;
  if (!attention && unavailable.empty()) {
    Expected<std::unique_ptr<cuda::CudnnAttention>> made =
        cuda::CudnnAttention::create(nullptr);
    if (made)
      attention = *std::move(made);
    else
      unavailable = made.error().message();
  }
  if (!attention)
    return unavailable;
  Expected<cuda::SdpaConfig> config = cuda::sdpaConfig(plan, step);
  if (!config)
    return config.error().message();
  Expected<const cuda::SdpaGraph *> graph = attention->build(*config);
  if (!graph)
    return config->describe() + ": " + graph.error().message();
  refused = false;
  if (Error e = attention->allocateWorkspace())
    return e.message();

  std::map<int64_t, void *> device; // value id -> its buffer
  auto release = [&] {
    for (auto &[id, p] : device)
      cudaFree(p);
  };
  auto fail = [&](const std::string &what, cudaError_t e) {
    release();
    return what + ": " + cudaGetErrorString(e);
  };
  for (size_t k = 0; k < step.operands.size(); ++k) {
    void *&p = device[step.operands[k]];
    if (cudaError_t e = cudaMalloc(&p, in[k].size()); e != cudaSuccess)
      return fail("cudaMalloc", e);
    cudaMemcpy(p, in[k].data(), in[k].size(), cudaMemcpyHostToDevice);
  }
  for (int64_t id : step.results) {
    void *&p = device[id];
    int64_t bytes = plan.values[id].bytes();
    if (cudaError_t e = cudaMalloc(&p, bytes); e != cudaSuccess)
      return fail("cudaMalloc", e);
    cudaMemset(p, 0xa5, bytes); // garbage, so that an unwritten result shows
  }
  std::vector<uint64_t> tensors;
  for (int64_t id : cuda::sdpaTensorIds(step))
    tensors.push_back(reinterpret_cast<uint64_t>(device.at(id)));
  if (Error e = cuda::runSdpa(**graph, tensors, nullptr)) {
    release();
    return e.message();
  }
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess)
    return fail("running cuDNN's SDPA", e);
  out.clear();
  for (int64_t id : step.results) {
    out.emplace_back(plan.values[id].bytes());
    cudaMemcpy(out.back().data(), device.at(id), out.back().size(),
               cudaMemcpyDeviceToHost);
  }
  release();
  return "";
}
#else
std::string runCudnnAttention(const Plan &, const PlanStep &,
                              const std::vector<std::vector<uint8_t>> &,
                              std::vector<std::vector<uint8_t>> &,
                              bool &refused) {
  refused = true;
  return "this build has no cuDNN";
}
#endif

} // namespace kiln::runtime::opcheck
