//===- CudaExecutor.cpp - Runs a plan on one GPU per rank -----------------===//

#include "kiln/Runtime/Cuda/CudaExecutor.h"
#include "CudaActions.h"

#include "kiln/Runtime/Numerics/Bf16.h"
#include "kiln/Runtime/Cuda/KernelCompiler.h"
#include "kiln/Runtime/Cuda/OpKernels.h"
#include "kiln/Runtime/MemoryCheck.h"
#include "kiln/Runtime/StateLayout.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace kiln::runtime::cuda {

namespace {
int64_t aligned(int64_t n) { return (n + 255) / 256 * 256; }

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

/// Everything the executor holds. Device addresses never change after
/// prepare(), which is what lets actions and graphs keep them.
struct CudaExecutor::State final : DeviceValues {
  explicit State(const Plan &plan) : plan(plan) {}
  ~State() override;

  const Plan &plan;
  comm::Communicator *host = nullptr;
  std::unique_ptr<comm::NcclCommunicator> nccl;
  int rankIndex = 0;
  int device = 0;
  cudaDeviceProp prop{};
  std::string arch;
  bool prepared = false, graphs = true, warnedCapture = false;
  /// The per-op numerics check: a device flag every computing step's
  /// results are checked into, and its pinned host copy.
  bool checkNumerics = false;
  uint64_t *numericsFlag = nullptr, *numericsHost = nullptr;
  cudaStream_t stream = nullptr;

  /// Device memory: the arena, the state, the small values (constants and
  /// per-run inputs), the step scratch; pinned host memory for inputs and
  /// outputs.
  char *arena = nullptr, *states = nullptr, *small = nullptr,
       *scratch = nullptr, *pinned = nullptr;
  int64_t scratchBytes = 0;
  std::map<int64_t, char *> at;       // state, const and input values
  std::map<int64_t, char *> pinnedAt; // inputs and outputs, host side
  std::unique_ptr<Gemms> gemms;
  std::unique_ptr<LoadedModule> ops;
  std::map<std::string, std::unique_ptr<LoadedModule>> groups;

  struct Entry {
    std::vector<Action> actions;
    int runs = 0;
    cudaGraphExec_t graph = nullptr;
    bool eagerOnly = false;
    /// With a trace: an event before each action and one after the last.
    std::vector<cudaEvent_t> marks;
  };
  std::map<std::string, Entry> entries;
  int64_t allocated = 0, predicted = 0, usedPeak = 0;
  Trace *trace = nullptr;

  void *address(int64_t id) const override {
    const PlanValue &v = plan.values[id];
    if (v.kind == PlanValue::Arena)
      return arena + v.offset;
    return at.at(id);
  }
  int rank() const override { return rankIndex; }

  std::string prepare();
  std::string allocate();
  std::string upload(const HostStates &host);
  std::string download(HostStates &host);
  std::string buildEntry(const std::string &name, Entry &entry);
  std::string launch(const std::string &name, Entry &entry);
  void noteMemory();
  /// Forgets every entry's actions and graph (built again at next use).
  void dropEntries();
  /// Adds each action of the run just finished to the trace: its time on
  /// the stream between its marks, named "<category>: <kernel> op N, <step>"
  /// (actionCategory), placed from `began` by the stream's own clock.
  std::string traceActions(const std::string &name, const Entry &entry,
                           Trace::Clock::time_point began);
};

std::string CudaExecutor::State::traceActions(const std::string &name,
                                              const Entry &entry,
                                              Trace::Clock::time_point began) {
  if (entry.marks.size() != entry.actions.size() + 1)
    return "";
  const std::vector<PlanStep> &steps = plan.entry(name)->steps;
  double at = 0; // milliseconds since the first mark
  for (size_t i = 0; i < entry.actions.size(); ++i) {
    float ms = 0;
    if (cudaError_t e =
            cudaEventElapsedTime(&ms, entry.marks[i], entry.marks[i + 1]);
        e != cudaSuccess)
      return cudaProblem("timing an action", e);
    const Action &a = entry.actions[i];
    std::string what = std::string(actionCategory(a)) + ": ";
    if (!a.kernelName.empty())
      what += a.kernelName + " ";
    what += "op " + std::to_string(a.step) + ", " +
            (a.step < steps.size() ? describeStep(plan, steps[a.step]) : "");
    auto offset = [&](double milliseconds) {
      return began + std::chrono::duration_cast<Trace::Clock::duration>(
                         std::chrono::duration<double, std::milli>(
                             milliseconds));
    };
    trace->add(what, Trace::Compute, offset(at), offset(at + ms));
    at += ms;
  }
  return "";
}

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
  nccl.reset();
}

std::unique_ptr<CudaExecutor> CudaExecutor::create(const Plan &plan,
                                                   std::string &error) {
  if (!plan.entry("init")) {
    error = "the plan has no 'init' entry";
    return nullptr;
  }
  for (const auto &[name, entry] : plan.entries)
    for (const PlanStep &step : entry.steps)
      if (!step.group && !runsOp(step.kind)) {
        error = "the CUDA backend cannot run op '" + step.op + "' (" + name +
                ", " + step.loc + ")";
        return nullptr;
      }
  for (const PlanValue &v : plan.values) {
    if (v.kind == PlanValue::State && v.dtype != DType::F32) {
      error = "state '" + v.name + "' is " + dtypeName(v.dtype) +
              "; the CUDA backend keeps state in f32";
      return nullptr;
    }
    if (v.kind == PlanValue::Const && v.dtype != DType::F32) {
      error = std::string("a ") + dtypeName(v.dtype) +
              " constant; the CUDA backend takes f32 constants";
      return nullptr;
    }
  }
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    error = std::string("no usable CUDA device (") + cudaGetErrorString(e) +
            ")";
    return nullptr;
  }
  if (count == 0) {
    error = "no CUDA device";
    return nullptr;
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

std::string CudaExecutor::setCommunicator(comm::Communicator *c) {
  int size = c ? c->size() : 1;
  if (size == 1 && s->plan.ranks != 1)
    return "the plan is for " + std::to_string(s->plan.ranks) +
           " ranks; start it with mpirun -np " +
           std::to_string(s->plan.ranks);
  if (size != s->plan.ranks)
    return "the plan is for " + std::to_string(s->plan.ranks) +
           " ranks but the run has " + std::to_string(size);
  if (s->prepared)
    return "the communicator is set before the executor's first use";
  s->host = c;
  s->rankIndex = c ? c->rank() : 0;
  if (s->plan.ranks > 1) {
    // One rank per GPU; NCCL picks this rank's device and sets it.
#ifdef KILN_HAVE_NCCL
    std::string error;
    // The collective deadline of the run (comm.train_timeout_seconds; 0
    // waits forever), as the MPI communicator keeps it.
    s->nccl = comm::createNcclCommunicator(
        *c, static_cast<double>(s->plan.training.commTimeoutSeconds), error);
    if (!s->nccl)
      return error;
    s->device = s->nccl->device();
#else
    return "this build has no NCCL (libnccl was not found when it was "
           "configured): the CUDA backend runs one rank only";
#endif
  }
  return s->prepare();
}

std::string CudaExecutor::State::prepare() {
  if (prepared)
    return "";
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess)
    return cudaProblem("selecting GPU " + std::to_string(device), e);
  if (cudaError_t e = cudaGetDeviceProperties(&prop, device); e != cudaSuccess)
    return cudaProblem("reading the device's properties", e);
  arch = kernelArch(prop.major, prop.minor);
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      e != cudaSuccess)
    return cudaProblem("creating a stream", e);
  std::string error;
  gemms = Gemms::create(error);
  if (!gemms)
    return error;
  scratchBytes = scratchBytesNeeded(plan, rankIndex, error);
  if (scratchBytes < 0)
    return error;
  if (std::string problem = allocate(); !problem.empty())
    return problem;
  std::optional<CompiledKernel> cubin = compileKernel(
      opKernelLibrarySource(), arch, defaultKernelCacheDir(), error);
  if (!cubin)
    return "NVRTC, compiling the op kernels: " + error;
  ops = LoadedModule::load(cubin->cubin, error);
  if (!ops)
    return error;
  if (cudaError_t e = cudaMalloc(&numericsFlag, sizeof(uint64_t));
      e != cudaSuccess)
    return cudaProblem("allocating the numerics flag", e);
  if (cudaError_t e = cudaMallocHost(&numericsHost, sizeof(uint64_t));
      e != cudaSuccess)
    return cudaProblem("allocating the numerics flag's host copy", e);
  prepared = true;
  noteMemory();
  return "";
}

std::string CudaExecutor::State::allocate() {
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
  int64_t backendBytes = smallBytes + scratchBytes + gemms->deviceBytes();
  predicted = predictedDeviceBytes(plan, backendBytes);

  size_t freeBytes = 0, totalBytes = 0;
  if (cudaError_t e = cudaMemGetInfo(&freeBytes, &totalBytes); e != cudaSuccess)
    return cudaProblem("cudaMemGetInfo", e);
  std::string deviceName =
      "GPU " + std::to_string(device) + " (" + prop.name + ")";
  if (std::string why = memoryShortfall(plan, backendBytes,
                                        static_cast<int64_t>(freeBytes),
                                        deviceName);
      !why.empty())
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
    return p;
  if (std::string p = grab(states, stateBytes, "the state"); !p.empty())
    return p;
  if (std::string p = grab(small, smallBytes, "inputs and constants");
      !p.empty())
    return p;
  if (std::string p = grab(scratch, scratchBytes, "scratch"); !p.empty())
    return p;
  allocated += gemms->deviceBytes();
  if (cudaError_t e = cudaMallocHost(&pinned, std::max<int64_t>(pinnedBytes, 256));
      e != cudaSuccess)
    return cudaProblem("allocating pinned host memory", e);

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
          return cudaProblem("uploading a constant", e);
      }
    }
  }
  for (const auto &[name, entry] : plan.entries)
    for (const auto &[out, id] : entry.outputs)
      if (!pinnedAt.count(id)) {
        pinnedAt[id] = pinned + pinnedAt_;
        pinnedAt_ += aligned(plan.values[id].bytes());
      }
  return "";
}

std::string CudaExecutor::State::upload(const HostStates &host) {
  for (const auto &[id, data] : host)
    if (cudaError_t e = cudaMemcpy(at.at(id), data.data(),
                                   data.size() * sizeof(float),
                                   cudaMemcpyHostToDevice);
        e != cudaSuccess)
      return cudaProblem("uploading '" + plan.values[id].name + "'", e);
  return "";
}

std::string CudaExecutor::State::download(HostStates &host) {
  host = zeroStates(plan);
  for (auto &[id, data] : host)
    if (cudaError_t e = cudaMemcpy(data.data(), at.at(id),
                                   data.size() * sizeof(float),
                                   cudaMemcpyDeviceToHost);
        e != cudaSuccess)
      return cudaProblem("downloading '" + plan.values[id].name + "'", e);
  return "";
}

std::string CudaExecutor::initialize(uint64_t seed) {
  if (std::string problem = s->prepare(); !problem.empty())
    return problem;
  HostStates host = zeroStates(s->plan);
  initializeStates(s->plan, s->rankIndex, seed, host);
  return s->upload(host);
}

std::optional<std::vector<FloatTensor>>
CudaExecutor::unshardedState(std::string &error) {
  if (std::string problem = s->prepare(); !problem.empty()) {
    error = problem;
    return std::nullopt;
  }
  HostStates host;
  if (std::string problem = s->download(host); !problem.empty()) {
    error = problem;
    return std::nullopt;
  }
  return unshardedStates(s->plan, host, s->host, error);
}

std::string CudaExecutor::setUnshardedState(
    const std::map<std::string, const FloatTensor *> &byName) {
  if (std::string problem = s->prepare(); !problem.empty())
    return problem;
  HostStates host = zeroStates(s->plan);
  if (std::string problem =
          setUnshardedStates(s->plan, s->rankIndex, byName, host);
      !problem.empty())
    return problem;
  return s->upload(host);
}

std::string CudaExecutor::State::buildEntry(const std::string &name,
                                            Entry &entry) {
  ActionContext ctx;
  ctx.plan = &plan;
  ctx.values = this;
  ctx.ops = ops.get();
  ctx.groups = &groups;
  ctx.arch = arch;
  ctx.cacheDir = defaultKernelCacheDir();
  ctx.scratch = scratch;
  ctx.scratchBytes = scratchBytes;
  ctx.numericsFlag = checkNumerics ? numericsFlag : nullptr;
  std::string error;
  std::optional<std::vector<Action>> body = buildActions(ctx, name, error);
  if (!body)
    return error;
  const PlanEntry *e = plan.entry(name);
  if (checkNumerics) {
    Action clear;
    clear.kind = Action::Memset;
    clear.dst = numericsFlag;
    clear.bytes = sizeof(uint64_t);
    entry.actions.push_back(clear);
  }
  // The inputs come in from pinned memory and the outputs go out to it, in
  // the same stream order (and so inside a captured graph too).
  for (const PlanValue &v : plan.values)
    if (v.kind == PlanValue::Input) {
      Action copy;
      copy.kind = Action::Copy;
      copy.dst = at.at(v.id);
      copy.src = pinnedAt.at(v.id);
      copy.bytes = v.bytes();
      entry.actions.push_back(copy);
    }
  entry.actions.insert(entry.actions.end(), body->begin(), body->end());
  for (const auto &[out, id] : e->outputs) {
    Action copy;
    copy.kind = Action::Copy;
    copy.step = e->steps.empty() ? 0 : e->steps.size() - 1;
    copy.dst = pinnedAt.at(id);
    copy.src = address(id);
    copy.bytes = plan.values[id].bytes();
    entry.actions.push_back(copy);
  }
  if (checkNumerics) {
    Action copy;
    copy.kind = Action::Copy;
    copy.step = e->steps.empty() ? 0 : e->steps.size() - 1;
    copy.dst = numericsHost;
    copy.src = numericsFlag;
    copy.bytes = sizeof(uint64_t);
    entry.actions.push_back(copy);
  }
  return "";
}

/// Enqueues an entry: as its actions on the first run (or always, without
/// graphs), else by replaying the graph captured on the second run.
std::string CudaExecutor::State::launch(const std::string &name,
                                        Entry &entry) {
  // A traced run is eager, with events around each action (traceActions).
  bool replay = graphs && !entry.eagerOnly && entry.runs >= 1 && !trace;
  if (replay && !entry.graph) {
    cudaGraph_t graph = nullptr;
    std::string problem;
    if (cudaError_t e = cudaStreamBeginCapture(stream,
                                               cudaStreamCaptureModeThreadLocal);
        e != cudaSuccess)
      problem = cudaProblem("starting a capture", e);
    if (problem.empty()) {
      problem = enqueueActions(plan, name, entry.actions, *gemms, nccl.get(),
                               stream);
      cudaError_t e = cudaStreamEndCapture(stream, &graph);
      if (problem.empty() && e != cudaSuccess)
        problem = cudaProblem("capturing " + name, e);
    }
    if (problem.empty())
      if (cudaError_t e = cudaGraphInstantiate(&entry.graph, graph, 0);
          e != cudaSuccess)
        problem = cudaProblem("instantiating the graph of " + name, e);
    if (graph)
      cudaGraphDestroy(graph);
    if (!problem.empty()) {
      // Eager launches are correct too, only slower: say so once and go on.
      cudaGetLastError();
      entry.eagerOnly = true;
      entry.graph = nullptr;
      if (!warnedCapture)
        std::fprintf(stderr, "warning: %s runs without a CUDA graph: %s\n",
                     name.c_str(), problem.c_str());
      warnedCapture = true;
      replay = false;
    }
  }
  if (!replay) {
    if (trace && entry.marks.empty()) {
      entry.marks.resize(entry.actions.size() + 1);
      for (cudaEvent_t &m : entry.marks)
        if (cudaError_t e = cudaEventCreate(&m); e != cudaSuccess)
          return cudaProblem("creating an event", e);
    }
    return enqueueActions(plan, name, entry.actions, *gemms, nccl.get(),
                          stream, trace ? &entry.marks : nullptr);
  }
  if (cudaError_t e = cudaGraphLaunch(entry.graph, stream); e != cudaSuccess)
    return cudaProblem("replaying the graph of " + name, e);
  return "";
}

void CudaExecutor::State::noteMemory() {
  size_t freeBytes = 0, totalBytes = 0;
  if (cudaMemGetInfo(&freeBytes, &totalBytes) == cudaSuccess)
    usedPeak = std::max<int64_t>(usedPeak,
                                 static_cast<int64_t>(totalBytes - freeBytes));
}

std::optional<std::map<std::string, std::vector<float>>>
CudaExecutor::run(const std::string &name, const std::vector<int32_t> &tokens,
                  const std::vector<int32_t> &targets, int64_t step,
                  std::string &error) {
  const Plan &plan = s->plan;
  if (!plan.entry(name)) {
    error = "the plan has no entry '" + name + "'";
    return std::nullopt;
  }
  if (std::string problem = s->prepare(); !problem.empty()) {
    error = problem;
    return std::nullopt;
  }
  // The kernels trust their indices: ids are checked here, as the CPU
  // backend's embedding and cross-entropy check them.
  for (const PlanValue &v : plan.values) {
    if (v.kind != PlanValue::Input)
      continue;
    char *host = s->pinnedAt.at(v.id);
    if (v.name == "step") {
      std::memcpy(host, &step, sizeof step);
      continue;
    }
    const std::vector<int32_t> &ids = v.name == "tokens" ? tokens : targets;
    if (static_cast<int64_t>(ids.size()) != v.numElements()) {
      error = "'" + v.name + "' has " + std::to_string(ids.size()) +
              " ids; the plan takes " + std::to_string(v.numElements());
      return std::nullopt;
    }
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < 0 || ids[i] >= plan.vocabSize) {
        error = "token id " + std::to_string(ids[i]) + " at position " +
                std::to_string(i) + " of '" + v.name +
                "' is outside the vocabulary of " +
                std::to_string(plan.vocabSize);
        return std::nullopt;
      }
    std::memcpy(host, ids.data(), ids.size() * sizeof(int32_t));
  }
  State::Entry &entry = s->entries[name];
  if (entry.actions.empty())
    if (std::string problem = s->buildEntry(name, entry); !problem.empty()) {
      error = problem;
      return std::nullopt;
    }
  Trace::Clock::time_point began = Trace::Clock::now();
  if (std::string problem = s->launch(name, entry); !problem.empty()) {
    error = problem;
    cudaStreamSynchronize(s->stream);
    return std::nullopt;
  }
  if (cudaError_t e = cudaStreamSynchronize(s->stream); e != cudaSuccess) {
    error = cudaProblem("running " + name +
                            " (run with --no-cuda-graphs and "
                            "CUDA_LAUNCH_BLOCKING=1 to find the op)",
                        e);
    return std::nullopt;
  }
  ++entry.runs;
  if (s->checkNumerics)
    if (std::optional<NonFinite> bad = decodeNonFinite(*s->numericsHost)) {
      const std::vector<PlanStep> &steps = plan.entry(name)->steps;
      if (bad->step >= static_cast<int64_t>(steps.size())) {
        error = "the numerics check of " + name + " names no step";
        return std::nullopt;
      }
      error = "op " + std::to_string(bad->step) + " of " + name + ", " +
              describeStep(plan, steps[bad->step]) + ": " + bad->describe();
      return std::nullopt;
    }
  if (s->trace) {
    s->trace->add(name, Trace::Compute, began, Trace::Clock::now());
    if (std::string problem = s->traceActions(name, entry, began);
        !problem.empty()) {
      error = problem;
      return std::nullopt;
    }
  }
  s->noteMemory();

  std::map<std::string, std::vector<float>> outputs;
  for (const auto &[out, id] : plan.entry(name)->outputs) {
    const PlanValue &v = plan.values[id];
    const char *host = s->pinnedAt.at(id);
    std::vector<float> &o = outputs[out];
    o.resize(v.numElements());
    if (v.dtype == DType::F32) {
      std::memcpy(o.data(), host, o.size() * sizeof(float));
    } else if (v.dtype == DType::BF16) {
      const auto *bits = reinterpret_cast<const uint16_t *>(host);
      for (size_t i = 0; i < o.size(); ++i)
        o[i] = numerics::fromBf16Bits(bits[i]);
    } else {
      error = std::string("output '") + out + "' is " + dtypeName(v.dtype) +
              "; outputs are f32 or bf16";
      return std::nullopt;
    }
  }
  return outputs;
}

std::string CudaExecutor::memoryReport() const {
  if (!s->prepared)
    return "";
  return "device memory: " + formatBytes(s->predicted) + " predicted, " +
         formatBytes(s->allocated) + " allocated by Kiln, " +
         formatBytes(s->usedPeak) + " in use on the device at most "
         "(cudaMemGetInfo, CUDA's own memory included)";
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
