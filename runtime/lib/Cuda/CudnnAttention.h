//===- CudnnAttention.h - Attention through cuDNN's fused SDPA --*- C++ -*-===//
//
// Internal to the CUDA backend. The plan's attention and attention_grad
// steps run through cuDNN's fused scaled dot-product attention (flash
// attention on tensor cores; cudnn-frontend's graph API, sdpa and
// sdpa_backward) wherever SdpaConfig.h maps them and cuDNN builds a graph
// for them; the hand-written kernels (Kernels/Attention.cpp) run the rest.
//
// One graph is built per distinct SdpaConfig (its key: forward or
// backward, batch, heads, kv heads, seq, head dim, dtype, causal, scale)
// and cached. All graphs share one workspace, sized for the largest and
// allocated once at load, before any CUDA graph capture: executing a
// built graph allocates nothing, so the executor's captured entries
// replay it. The backward asks for cuDNN's deterministic algorithm (so
// that runs, and a graph's replay and its eager launches, give the same
// bits); where that is refused or its workspace would exceed 1 GiB it
// takes the default one (dQ accumulated with atomics), and says so.
//
// Built with cuDNN (CudnnAttention.cpp) when CMake found cudnn.h, libcudnn
// and the cudnn-frontend headers (runtime/cmake/Cudnn.cmake); without
// them (CudnnAttentionNone.cpp) nothing runs through cuDNN and create()
// says why. Not thread-safe; graphs run on one stream at a time (they
// share the workspace).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDA_CUDNNATTENTION_H
#define KILN_RUNTIME_CUDA_CUDNNATTENTION_H

#include "SdpaConfig.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

typedef struct CUstream_st *cudaStream_t;

namespace kiln::runtime::cuda {

/// A built cuDNN SDPA graph (defined in CudnnAttention.cpp).
struct SdpaGraph;

/// Which SDPA configurations have a built graph: the executor's
/// CudnnAttention, or a stand-in in a host dry run of the actions.
class SdpaGraphs {
public:
  virtual ~SdpaGraphs() = default;
  /// The graph built for `config`; null when cuDNN does not run it.
  virtual const SdpaGraph *find(const SdpaConfig &config) const = 0;
};

class CudnnAttention final : public SdpaGraphs {
public:
  /// A cuDNN handle on the current device; the reason when this build has
  /// no cuDNN or cuDNN does not start (its libraries, the device). What
  /// building a graph uploads goes on `stream` (the executor's compute
  /// stream, never the legacy one).
  static Expected<std::unique_ptr<CudnnAttention>> create(cudaStream_t stream);
  ~CudnnAttention() override;

  /// The graph of `config`, built at its first call; the reason cuDNN
  /// refuses it otherwise ("cuDNN refused it (check_support): ..."), also
  /// remembered. Building may compile kernels (seconds); never call it
  /// while a stream is being captured.
  Expected<const SdpaGraph *> build(const SdpaConfig &config);
  const SdpaGraph *find(const SdpaConfig &config) const override;

  /// Makes the workspace as large as every graph built so far needs (a new
  /// allocation, and the old freed, when it grows). Before any capture.
  Error allocateWorkspace();
  /// Device bytes held: the workspace and the graphs' sequence lengths.
  int64_t deviceBytes() const;
  /// What to say about a built graph: empty, or why a backward graph runs
  /// cuDNN's default algorithm, which is not deterministic.
  std::string note(const SdpaGraph &graph) const;

  /// "cuDNN 9.19.0, cudnn-frontend 1.16.0" (the loaded cuDNN's version).
  std::string version() const;

  struct Impl;

private:
  explicit CudnnAttention(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

/// Enqueues `graph` on `stream` with `tensors`, the device addresses in
/// SdpaSlot order (kSdpaForwardSlots or kSdpaBackwardSlots of them).
/// Needs the workspace allocated; allocates nothing, so it may be captured.
Error runSdpa(const SdpaGraph &graph, const std::vector<uint64_t> &tensors,
              cudaStream_t stream);

/// Describes the graph of `config` in the variants CudnnAttention tries,
/// in order, and has cudnn-frontend validate each and lower it to cuDNN's
/// operation graph without a handle (cuDNN then checks the operations'
/// dims against each other): no device work, but the frontend reads the
/// device's properties. The first variant that passes ("deterministic",
/// "default", "the frontend's choice", "composite"; ", padding mask"), or
/// the first refusal. For the host check kiln-cudnn-graph-check.
Expected<std::string> validateSdpa(const SdpaConfig &config);

/// For the executor at load, on its device: builds the graph of every
/// attention step of every entry of `plan` that sdpaConfig maps, allocates
/// the workspace, and says once on stderr which attention runs and why
/// (attentionSummary). Null when no step runs through cuDNN. Uploads go on
/// `stream`.
std::unique_ptr<CudnnAttention> prepareAttention(const Plan &plan,
                                                 cudaStream_t stream);

} // namespace kiln::runtime::cuda

#endif // KILN_RUNTIME_CUDA_CUDNNATTENTION_H
