//===- CudnnAttentionNone.cpp - CudnnAttention.h without cuDNN ------------===//
//
// Built instead of CudnnAttention.cpp where CMake found no cuDNN or no
// cudnn-frontend headers (runtime/cmake/Cudnn.cmake): every attention step
// runs on the hand-written kernels, and the executor says so once.
//
//===----------------------------------------------------------------------===//

#include "CudnnAttention.h"

namespace kiln::runtime::cuda {

namespace {
const char *kNoCudnn =
    "this build has no cuDNN: cudnn.h, libcudnn or the cudnn-frontend "
    "headers were not found when it was configured (scripts/bootstrap; "
    "docs/cuda.md, \"Attention\")";
} // namespace

struct SdpaGraph {};
struct CudnnAttention::Impl {};

CudnnAttention::CudnnAttention(std::unique_ptr<Impl> impl)
    : impl(std::move(impl)) {}
CudnnAttention::~CudnnAttention() = default;

Expected<std::unique_ptr<CudnnAttention>> CudnnAttention::create(cudaStream_t) {
  return Error(kNoCudnn);
}

Expected<const SdpaGraph *> CudnnAttention::build(const SdpaConfig &) {
  return Error(kNoCudnn);
}

const SdpaGraph *CudnnAttention::find(const SdpaConfig &) const {
  return nullptr;
}

Error CudnnAttention::allocateWorkspace() { return Error::success(); }
int64_t CudnnAttention::deviceBytes() const { return 0; }
std::string CudnnAttention::note(const SdpaGraph &) const { return ""; }
std::string CudnnAttention::version() const { return "no cuDNN"; }

Error runSdpa(const SdpaGraph &, const std::vector<uint64_t> &, cudaStream_t) {
  return Error(kNoCudnn);
}

Expected<std::string> validateSdpa(const SdpaConfig &) {
  return Error(kNoCudnn);
}

std::unique_ptr<CudnnAttention> prepareAttention(const Plan &plan,
                                                 cudaStream_t) {
  AttentionTally tally;
  for (const auto &[name, entry] : plan.entries)
    for (const PlanStep &s : entry.steps)
      tally.kernelSteps += isAttention(s.kind) ? 1 : 0;
  tally.unavailable = kNoCudnn;
  sayOnce(attentionSummary(tally, ""));
  return nullptr;
}

} // namespace kiln::runtime::cuda
