//===- CudnnAttention.cpp - Attention through cuDNN's fused SDPA ----------===//
//
// The graphs of CudnnAttention.h, built with cudnn-frontend's graph API as
// its SDPA samples do (samples/cpp/sdpa/fp16_fwd.cpp, fp16_bwd.cpp): bf16
// Q, K, V, O (dO, dQ, dK, dV) in place in the plan's layout by strides
// (SdpaConfig.h), f32 stats, f32 intermediates and compute, the scale by
// value, the causal mask as a diagonal band (top left, right bound 0).
//
// A configuration is tried in up to two variants, the first that cuDNN
// builds winning: the forward with the implementation the frontend picks,
// then its composite one; the backward with the deterministic algorithm,
// then the default one (also when the deterministic one's workspace would
// exceed kDeterministicWorkspaceLimit). Before cuDNN 9.16 the frontend
// makes the backward of a sequence that is not a multiple of 128 mask
// padding, copying the sequence lengths from host memory into the
// workspace at every run, which a CUDA graph capture refuses; for those
// this file gives the padding mask itself, its lengths (all the sequence
// length) in device memory written once at build.
//
// The frontend reports failures as error_t, but may also throw (it is
// compiled with exceptions, as the runtime is): every call into it is
// inside a try block, so an exception becomes a refusal or an Error.
//
//===----------------------------------------------------------------------===//

#include "CudnnAttention.h"

#include <cuda_runtime.h>
#include <cudnn.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <exception>
#include <map>
#include <unordered_map>

namespace kiln::runtime::cuda {

namespace fe = cudnn_frontend;

namespace {

/// Tensor uids: one per SdpaSlot, then the padding mask's lengths.
int64_t uid(SdpaSlot slot) { return static_cast<int64_t>(slot) + 1; }
constexpr int64_t kSeqLenQ = 100, kSeqLenKv = 101;

/// The most workspace the deterministic backward may ask for.
constexpr int64_t kDeterministicWorkspaceLimit = int64_t(1) << 30;

std::vector<int64_t> list(const std::array<int64_t, 4> &a) {
  return {a.begin(), a.end()};
}

/// A message on one line.
std::string oneLine(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  while (!text.empty() && text.back() == ' ')
    text.pop_back();
  return text;
}

std::string cudaText(const std::string &what, cudaError_t e) {
  return "CUDA error: " + what + " (" + cudaGetErrorString(e) + ")";
}

/// How one configuration is built.
struct Variant {
  bool composite = false;     // the forward's composite implementation
  bool deterministic = false; // the backward's deterministic algorithm
  bool padding = false;       // the backward's explicit padding mask
};

/// The variants of `c` in the order they are tried.
std::vector<Variant> variants(const SdpaConfig &c) {
  if (!c.backward)
    return {{false, false, false}, {true, false, false}};
  bool padding = c.seq % 128 != 0 && cudnnGetVersion() < 91600;
  return {{false, true, padding}, {false, false, padding}};
}

/// "deterministic", "default", "the frontend's choice", "composite"; the
/// backward's padding mask added.
std::string nameOf(const SdpaConfig &c, const Variant &v) {
  if (!c.backward)
    return v.composite ? "composite" : "the frontend's choice";
  return std::string(v.deterministic ? "deterministic" : "default") +
         (v.padding ? ", padding mask" : "");
}

std::string refusal(const char *stage, fe::error_t e) {
  return std::string("cuDNN refused it (") + stage +
         "): " + oneLine(e.get_message());
}

/// The frontend graph of `c` built as `v`, not yet validated (may throw).
std::shared_ptr<fe::graph::Graph> describe(const SdpaConfig &c,
                                           const Variant &v) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto tensor = [&](const char *name, SdpaSlot slot, const SdpaTensor &t) {
    return g->tensor(fe::graph::Tensor_attributes()
                         .set_name(name)
                         .set_uid(uid(slot))
                         .set_dim(list(t.dim))
                         .set_stride(list(t.stride)));
  };
  auto output = [&](const std::shared_ptr<fe::graph::Tensor_attributes> &t,
                    SdpaSlot slot, const SdpaTensor &layout) {
    t->set_output(true)
        .set_uid(uid(slot))
        .set_dim(list(layout.dim))
        .set_stride(list(layout.stride));
  };
  auto q = tensor("Q", SdpaSlot::Q, c.query());
  auto k = tensor("K", SdpaSlot::K, c.keyValue());
  auto vv = tensor("V", SdpaSlot::V, c.keyValue());
  if (!c.backward) {
    fe::graph::SDPA_attributes options;
    options.set_name("kiln_attention")
        .set_generate_stats(true)
        .set_attn_scale(c.scale);
    if (c.causal)
      options.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
          .set_diagonal_band_right_bound(0);
    if (v.composite)
      options.set_implementation(fe::AttentionImplementation_t::COMPOSITE);
    auto [o, stats] = g->sdpa(q, k, vv, options);
    output(o, SdpaSlot::O, c.query());
    output(stats, SdpaSlot::Stats, c.stats());
    stats->set_data_type(fe::DataType_t::FLOAT);
    return g;
  }
  auto o = tensor("O", SdpaSlot::O, c.query());
  auto dO = tensor("dO", SdpaSlot::dO, c.query());
  auto stats = tensor("Stats", SdpaSlot::Stats, c.stats());
  stats->set_data_type(fe::DataType_t::FLOAT);
  fe::graph::SDPA_backward_attributes options;
  options.set_name("kiln_attention_grad")
      .set_attn_scale(c.scale)
      .set_deterministic_algorithm(v.deterministic);
  if (c.causal)
    options.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
        .set_diagonal_band_right_bound(0);
  if (v.padding) {
    auto length = [&](const char *name, int64_t id) {
      return g->tensor(fe::graph::Tensor_attributes()
                           .set_name(name)
                           .set_uid(id)
                           .set_dim({c.batch, 1, 1, 1})
                           .set_stride({1, 1, 1, 1})
                           .set_data_type(fe::DataType_t::INT32));
    };
    options.set_padding_mask(true)
        .set_seq_len_q(length("seq_len_q", kSeqLenQ))
        .set_seq_len_kv(length("seq_len_kv", kSeqLenKv));
  }
  auto [dQ, dK, dV] = g->sdpa_backward(q, k, vv, o, dO, stats, options);
  output(dQ, SdpaSlot::dQ, c.query());
  output(dK, SdpaSlot::dK, c.keyValue());
  output(dV, SdpaSlot::dV, c.keyValue());
  return g;
}

} // namespace

struct SdpaGraph {
  CudnnAttention::Impl *owner = nullptr;
  SdpaConfig config;
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspaceBytes = 0;
  /// The padding mask's lengths on the device (batch query lengths, then
  /// batch key lengths, each the sequence length); null without it.
  int32_t *seqLengths = nullptr;
  std::string note;
};

struct CudnnAttention::Impl {
  cudnnHandle_t handle = nullptr;
  cudaStream_t stream = nullptr; // where build() uploads
  std::map<SdpaConfig, std::unique_ptr<SdpaGraph>> graphs;
  std::map<SdpaConfig, std::string> refused;
  void *workspace = nullptr;
  int64_t workspaceBytes = 0, lengthBytes = 0;

  ~Impl() {
    for (auto &[config, g] : graphs)
      if (g->seqLengths)
        cudaFree(g->seqLengths);
    graphs.clear();
    if (workspace)
      cudaFree(workspace);
    if (handle)
      cudnnDestroy(handle);
  }

  /// The graph of `c` built as `v`; the reason cuDNN refuses it otherwise.
  Expected<std::shared_ptr<fe::graph::Graph>> make(const SdpaConfig &c,
                                                   const Variant &v);
  /// The first variant of `c` cuDNN builds, with its workspace and note.
  Expected<std::unique_ptr<SdpaGraph>> build(const SdpaConfig &c);
};

Expected<std::shared_ptr<fe::graph::Graph>>
CudnnAttention::Impl::make(const SdpaConfig &c, const Variant &v) {
  std::shared_ptr<fe::graph::Graph> g = describe(c, v);
  auto refused = [](const char *stage, fe::error_t e) {
    return Error(refusal(stage, e));
  };
  if (fe::error_t e = g->validate(); e.is_bad())
    return refused("validate", e);
  if (fe::error_t e = g->build_operation_graph(handle); e.is_bad())
    return refused("build_operation_graph", e);
  if (fe::error_t e = g->create_execution_plans({fe::HeurMode_t::A});
      e.is_bad())
    return refused("create_execution_plans", e);
  if (fe::error_t e = g->check_support(handle); e.is_bad())
    return refused("check_support", e);
  if (fe::error_t e = g->build_plans(); e.is_bad())
    return refused("build_plans", e);
  return g;
}

Expected<std::unique_ptr<SdpaGraph>>
CudnnAttention::Impl::build(const SdpaConfig &c) {
  std::string first;
  for (const Variant &v : variants(c)) {
    Expected<std::shared_ptr<fe::graph::Graph>> g = Error("not built");
    try {
      g = make(c, v);
    } catch (const std::exception &e) {
      g = Error(std::string("cuDNN refused it: ") + oneLine(e.what()));
    }
    int64_t bytes = 0;
    if (g) {
      if (fe::error_t e = (*g)->get_workspace_size(bytes); e.is_bad())
        g = Error(refusal("get_workspace_size", e));
      else if (v.deterministic && bytes > kDeterministicWorkspaceLimit)
        g = Error("its deterministic algorithm needs " +
                  std::to_string(bytes >> 20) + " MiB of workspace");
    }
    if (!g) {
      if (first.empty())
        first = g.error().message();
      continue;
    }
    auto graph = std::make_unique<SdpaGraph>();
    graph->owner = this;
    graph->config = c;
    graph->graph = *std::move(g);
    graph->workspaceBytes = bytes;
    if (c.backward && !v.deterministic)
      graph->note = c.describe() +
                    ": cuDNN's default backward, not deterministic (" + first +
                    ")";
    if (v.padding) {
      std::vector<int32_t> lengths(2 * c.batch, static_cast<int32_t>(c.seq));
      int64_t size = static_cast<int64_t>(lengths.size() * sizeof(int32_t));
      if (cudaError_t e = cudaMalloc(&graph->seqLengths, size);
          e != cudaSuccess)
        return Error(cudaText("allocating the sequence lengths", e));
      lengthBytes += size;
      cudaError_t e = cudaMemcpyAsync(graph->seqLengths, lengths.data(), size,
                                      cudaMemcpyHostToDevice, stream);
      if (e == cudaSuccess)
        e = cudaStreamSynchronize(stream);
      if (e != cudaSuccess) {
        cudaFree(graph->seqLengths);
        return Error(cudaText("writing the sequence lengths", e));
      }
    }
    return std::move(graph);
  }
  return Error(first);
}

CudnnAttention::CudnnAttention(std::unique_ptr<Impl> impl)
    : impl(std::move(impl)) {}
CudnnAttention::~CudnnAttention() = default;

Expected<std::unique_ptr<CudnnAttention>>
CudnnAttention::create(cudaStream_t stream) {
  auto impl = std::make_unique<Impl>();
  impl->stream = stream;
  if (cudnnStatus_t s = cudnnCreate(&impl->handle); s != CUDNN_STATUS_SUCCESS) {
    impl->handle = nullptr;
    return Error(std::string("cudnnCreate: ") + cudnnGetErrorString(s));
  }
  return std::unique_ptr<CudnnAttention>(new CudnnAttention(std::move(impl)));
}

Expected<const SdpaGraph *> CudnnAttention::build(const SdpaConfig &c) {
  if (const SdpaGraph *g = find(c))
    return g;
  if (auto it = impl->refused.find(c); it != impl->refused.end())
    return Error(it->second);
  Expected<std::unique_ptr<SdpaGraph>> g = impl->build(c);
  if (!g) {
    impl->refused[c] = g.error().message();
    return g.takeError();
  }
  const SdpaGraph *built = g->get();
  impl->graphs[c] = *std::move(g);
  return built;
}

const SdpaGraph *CudnnAttention::find(const SdpaConfig &c) const {
  auto it = impl->graphs.find(c);
  return it == impl->graphs.end() ? nullptr : it->second.get();
}

Error CudnnAttention::allocateWorkspace() {
  int64_t most = 0;
  for (const auto &[c, g] : impl->graphs)
    most = std::max(most, g->workspaceBytes);
  if (most <= impl->workspaceBytes)
    return Error::success();
  if (impl->workspace)
    cudaFree(impl->workspace);
  impl->workspace = nullptr;
  impl->workspaceBytes = 0;
  if (cudaError_t e = cudaMalloc(&impl->workspace, most); e != cudaSuccess) {
    impl->workspace = nullptr;
    return Error(cudaText("allocating the cuDNN workspace (" +
                              std::to_string(most) + " bytes)",
                          e));
  }
  impl->workspaceBytes = most;
  return Error::success();
}

int64_t CudnnAttention::deviceBytes() const {
  return impl->workspaceBytes + impl->lengthBytes;
}

std::string CudnnAttention::note(const SdpaGraph &g) const { return g.note; }

std::string CudnnAttention::version() const {
  size_t v = cudnnGetVersion();
  return "cuDNN " + std::to_string(v / 10000) + "." +
         std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100) +
         ", cudnn-frontend " + std::to_string(CUDNN_FRONTEND_MAJOR_VERSION) +
         "." + std::to_string(CUDNN_FRONTEND_MINOR_VERSION) + "." +
         std::to_string(CUDNN_FRONTEND_PATCH_VERSION);
}

Error runSdpa(const SdpaGraph &g, const std::vector<uint64_t> &tensors,
              cudaStream_t stream) {
  CudnnAttention::Impl &impl = *g.owner;
  size_t slots = g.config.backward ? kSdpaBackwardSlots : kSdpaForwardSlots;
  if (tensors.size() != slots)
    return Error("cuDNN SDPA: " + std::to_string(tensors.size()) +
                 " tensors, not " + std::to_string(slots));
  if (impl.workspaceBytes < g.workspaceBytes)
    return Error("cuDNN SDPA: the workspace was not allocated for this graph");
  if (cudnnStatus_t s = cudnnSetStream(impl.handle, stream);
      s != CUDNN_STATUS_SUCCESS)
    return Error(std::string("cudnnSetStream: ") + cudnnGetErrorString(s));
  std::unordered_map<int64_t, void *> pack;
  for (size_t i = 0; i < slots; ++i)
    pack[uid(static_cast<SdpaSlot>(i))] = reinterpret_cast<void *>(tensors[i]);
  if (g.seqLengths) {
    pack[kSeqLenQ] = g.seqLengths;
    pack[kSeqLenKv] = g.seqLengths + g.config.batch;
  }
  try {
    if (fe::error_t e = g.graph->execute(impl.handle, pack, impl.workspace);
        e.is_bad())
      return Error("cuDNN SDPA: " + oneLine(e.get_message()));
  } catch (const std::exception &e) {
    return Error(std::string("cuDNN SDPA: ") + oneLine(e.what()));
  }
  return Error::success();
}

Expected<std::string> validateSdpa(const SdpaConfig &c) {
  std::string first;
  for (const Variant &v : variants(c)) {
    std::string problem;
    try {
      std::shared_ptr<fe::graph::Graph> g = describe(c, v);
      if (fe::error_t e = g->validate(); e.is_bad())
        problem = refusal("validate", e);
      else if (fe::error_t e = g->build_operation_graph(nullptr); e.is_bad())
        problem = refusal("build_operation_graph", e);
    } catch (const std::exception &e) {
      problem = std::string("cuDNN refused it: ") + oneLine(e.what());
    }
    if (problem.empty())
      return nameOf(c, v);
    if (first.empty())
      first = problem;
  }
  return Error(first);
}

std::unique_ptr<CudnnAttention> prepareAttention(const Plan &plan,
                                                 cudaStream_t stream) {
  AttentionTally tally;
  std::vector<const PlanStep *> steps;
  for (const auto &[name, entry] : plan.entries)
    for (const PlanStep &s : entry.steps)
      if (isAttention(s.kind))
        steps.push_back(&s);
  if (steps.empty())
    return nullptr;
  Expected<std::unique_ptr<CudnnAttention>> attention =
      CudnnAttention::create(stream);
  if (!attention) {
    tally.kernelSteps = static_cast<int>(steps.size());
    tally.unavailable = attention.error().message();
    sayOnce(attentionSummary(tally, ""));
    return nullptr;
  }
  std::map<const SdpaGraph *, bool> used;
  for (const PlanStep *s : steps) {
    Expected<SdpaConfig> config = sdpaConfig(plan, *s);
    Expected<const SdpaGraph *> graph =
        config ? (*attention)->build(*config) : config.takeError();
    if (config && !graph)
      graph = Error(config->describe() + ": " + graph.error().message());
    if (!graph) {
      ++tally.kernelSteps;
      if (tally.firstFallback.empty())
        tally.firstFallback = graph.error().message();
      continue;
    }
    ++tally.cudnnSteps;
    if (used.emplace(*graph, true).second) {
      ++tally.graphs;
      std::string note = (*attention)->note(**graph);
      if (!note.empty() && tally.note.empty())
        tally.note = note;
    }
  }
  if (tally.cudnnSteps > 0)
    if (Error e = (*attention)->allocateWorkspace()) {
      tally = AttentionTally{};
      tally.kernelSteps = static_cast<int>(steps.size());
      tally.unavailable = e.message();
      sayOnce(attentionSummary(tally, ""));
      return nullptr;
    }
  sayOnce(attentionSummary(tally, (*attention)->version()));
  if (tally.cudnnSteps == 0)
    return nullptr;
  return *std::move(attention);
}

} // namespace kiln::runtime::cuda
