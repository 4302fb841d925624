//===- CpuStepBench.cpp - Kiln's CPU training step vs LibTorch eager ------===//
//
// kiln-bench-cpu: times one full training step (forward, backward, gradient
// clipping, AdamW) of the same model on the same batches and thread count:
// Kiln's compiled plan on the CPU executor in fp32, the same with the
// default bf16 policy, and the LibTorch oracle model
// (tests/oracle/TorchLlama.h) run eagerly in fp32 with torch::optim::AdamW;
// with more than one thread, torch also with OpenBLAS at one thread (see
// main). All start from the weights Kiln's executor initialises, so their
// first-step losses agree, and take turns step by step. docs/perf.md has
// the results.
//
//===----------------------------------------------------------------------===//

#include "TorchLlama.h"

#include "kiln/Driver/Session.h"
#include "kiln/Runtime/Cpu/Common.h"
#include "kiln/Runtime/Cpu/CpuExecutor.h"
#include "kiln/Runtime/Train/Data.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace kiln;
using namespace kiln::runtime;

namespace {

struct Options {
  std::string model = "llama3-debug";
  int threads = 2;
  int steps = 10;
  bool perStep = false;
  std::vector<std::string> sets;
};

// Enough warm-up for the arena's pages, OpenBLAS's buffers and torch's
// allocator caches to settle; the first step of each is visibly slower.
constexpr int kWarmupSteps = 2;

void usage(const char *argv0) {
  std::fprintf(stderr,
               "usage: %s [--model NAME] [--threads N] [--steps N] "
               "[--set key=value]... [--per-step]\n"
               "  --model    model file or preset (default llama3-debug)\n"
               "  --threads  threads for Kiln and LibTorch (default 2)\n"
               "  --steps    timed steps, after %d warm-up steps (default "
               "10)\n"
               "  --set      override a model-file key, as `kiln train --set`\n"
               "  --per-step also print every step's time, warm-up included\n",
               argv0, kWarmupSteps);
}

/// Parses the command line; prints usage and returns nothing on a bad one.
std::optional<Options> parseArgs(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      usage(argv[0]);
      std::exit(0);
    }
    if (arg == "--per-step") {
      o.perStep = true;
      continue;
    }
    // Both `--flag value` and `--flag=value`.
    std::string value;
    size_t eq = arg.find('=');
    bool inlineValue = arg.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inlineValue)
      arg = arg.substr(0, eq);
    if (arg != "--model" && arg != "--threads" && arg != "--steps" &&
        arg != "--set") {
      std::fprintf(stderr, "error: unknown argument '%s'\n", argv[i]);
      usage(argv[0]);
      return std::nullopt;
    }
    if (inlineValue) {
      value = std::string(argv[i]).substr(eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      std::fprintf(stderr, "error: %s needs a value\n", arg.c_str());
      usage(argv[0]);
      return std::nullopt;
    }
    auto positive = [&](int &out) {
      char *end = nullptr;
      long n = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end || n < 1 || n > 100000) {
        std::fprintf(stderr, "error: %s wants a positive integer, got '%s'\n",
                     arg.c_str(), value.c_str());
        return false;
      }
      out = static_cast<int>(n);
      return true;
    };
    if (arg == "--model") {
      o.model = value;
    } else if (arg == "--threads") {
      if (!positive(o.threads))
        return std::nullopt;
    } else if (arg == "--steps") {
      if (!positive(o.steps))
        return std::nullopt;
    } else {
      o.sets.push_back(value);
    }
  }
  return o;
}

/// A compiled plan with the configuration it came from. The plan must
/// outlive the executor made from it, which keeps a reference.
struct Compiled {
  Config config;
  Plan plan;
};

std::optional<Compiled> compile(const std::string &model,
                                const std::vector<std::string> &sets) {
  ModelSession session;
  if (!session.load(model, sets))
    return std::nullopt;
  std::optional<std::string> text = session.compilePlan();
  if (!text)
    return std::nullopt;
  std::string error;
  Expected<Plan> plan = parsePlan(*text);
  if (!plan) {
    std::fprintf(stderr, "error: the compiled plan does not parse: %s\n",
                 plan.error().message().c_str());
    return std::nullopt;
  }
  return Compiled{*session.config, std::move(*plan)};
}

/// The batches of steps 1..n, drawn as `kiln train` draws them.
struct Batches {
  std::vector<std::vector<int32_t>> tokens, targets;
};

std::optional<Batches> makeBatches(const Config &config, int n) {
  const TrainingConfig &t = config.training;
  Expected<Dataset> data =
      loadDataset(t.data, config.model.vocab_size, t.seq_len);
  if (!data) {
    std::fprintf(stderr, "error: %s\n", data.error().message().c_str());
    return std::nullopt;
  }
  const Split &split = data->split;
  Batches b;
  for (int step = 1; step <= n; ++step) {
    std::vector<int32_t> in(t.global_batch_size * t.seq_len),
        tg(t.global_batch_size * t.seq_len);
    fillBatch(data->tokens, split.trainBegin, split.trainEnd,
              t.global_batch_size, t.seq_len, static_cast<uint64_t>(t.seed),
              step, in.data(), tg.data());
    b.tokens.push_back(std::move(in));
    b.targets.push_back(std::move(tg));
  }
  return b;
}

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point began) {
  return std::chrono::duration<double>(Clock::now() - began).count();
}

/// What one engine measured, one entry per step, warm-up included.
struct Timings {
  std::vector<double> seconds, losses;
};

/// The parameters after initialize(seed), by HF name: every state value
/// that is not zero-initialised (the optimizer moments are).
oracle::Tensors initialWeights(const Plan &plan, CpuExecutor &exec) {
  oracle::Tensors weights;
  for (const PlanValue &v : plan.values)
    if (v.kind == PlanValue::State && v.init.kind != InitSpec::Zeros) {
      std::vector<float> *w = exec.state(v.name);
      weights[v.name].assign(w->begin(), w->end());
    }
  return weights;
}

/// An executor for `c`, initialised as `kiln train` does.
std::unique_ptr<CpuExecutor> makeExecutor(const Compiled &c) {
  Expected<std::unique_ptr<CpuExecutor>> created = CpuExecutor::create(c.plan);
  if (!created) {
    std::fprintf(stderr, "error: %s\n", created.error().message().c_str());
    return nullptr;
  }
  std::unique_ptr<CpuExecutor> exec = std::move(*created);
  if (Error e =
          exec->initialize(static_cast<uint64_t>(c.config.training.seed))) {
    std::fprintf(stderr, "error: %s\n", e.message().c_str());
    return nullptr;
  }
  return exec;
}

/// Runs and times `train_step` on batch `i` (step i + 1); `lr`, when given,
/// receives the step's learning rate.
bool kilnStep(CpuExecutor &exec, const Batches &batches, size_t i,
              Timings &timings, double *lr) {
  Clock::time_point began = Clock::now();
  Expected<EntryOutputs> out =
      exec.run("train_step", batches.tokens[i], batches.targets[i],
               static_cast<int64_t>(i + 1));
  double seconds = secondsSince(began);
  if (!out) {
    std::fprintf(stderr, "error: step %zu: %s\n", i + 1,
                 out.error().message().c_str());
    return false;
  }
  timings.seconds.push_back(seconds);
  timings.losses.push_back(out->at("loss")[0]);
  if (lr)
    *lr = out->at("lr")[0];
  return true;
}

struct Row {
  std::string name;
  double median, min; // seconds per step, over the timed steps
};

Row summarize(const std::string &name, const std::vector<double> &seconds) {
  std::vector<double> timed(seconds.begin() + kWarmupSteps, seconds.end());
  std::sort(timed.begin(), timed.end());
  size_t n = timed.size();
  double median =
      n % 2 ? timed[n / 2] : 0.5 * (timed[n / 2 - 1] + timed[n / 2]);
  return {name, median, timed.front()};
}

} // namespace

int main(int argc, char **argv) {
  std::optional<Options> options = parseArgs(argc, argv);
  if (!options)
    return 2;

  // Both thread pools before any work: torch fixes its inter-op pool at
  // first use, and one inter-op thread keeps eager mode from running two
  // ops at once on cores the intra-op threads already fill.
  cpu::setCpuThreads(options->threads);
  oracle::setTorchThreads(options->threads);

  std::vector<std::string> fp32Sets = options->sets;
  fp32Sets.push_back("mixed_precision.param=\"float32\"");
  std::optional<Compiled> fp32 = compile(options->model, fp32Sets);
  if (!fp32)
    return 1;
  std::optional<Compiled> bf16 = compile(options->model, options->sets);
  if (!bf16)
    return 1;

  const Config &config = fp32->config;
  int64_t batch = config.training.global_batch_size;
  int64_t seq = config.training.seq_len;
  int total = kWarmupSteps + options->steps;
  std::optional<Batches> batches = makeBatches(config, total);
  if (!batches)
    return 1;

  std::unique_ptr<CpuExecutor> fp32Exec = makeExecutor(*fp32);
  std::unique_ptr<CpuExecutor> bf16Exec = makeExecutor(*bf16);
  if (!fp32Exec || !bf16Exec)
    return 1;
  // Torch starts from Kiln's initial weights, so the first-step losses of
  // Kiln fp32 and torch must agree: both run the same model.
  oracle::Tensors weights = initialWeights(fp32->plan, *fp32Exec);
  const ModelConfig &m = config.model;
  oracle::LlamaShape shape{m.dim,       m.n_layers,   m.n_heads,
                           m.kvHeads(), m.vocab_size, m.ffnHiddenDim(),
                           m.norm_eps,  m.rope_theta, m.tie_embeddings};
  const OptimizerConfig &opt = config.optimizer;
  oracle::AdamWConfig adamw{opt.betas[0], opt.betas[1], opt.eps,
                            opt.weight_decay, opt.max_norm};
  oracle::EagerTrainer eager(shape, weights, batch, seq, adamw,
                             oracle::Precision::Float32);
  // Debian's LibTorch runs GEMMs on OpenBLAS's pthreads and its other ops
  // on OpenMP threads. With both pools at N threads they compete for the
  // same cores (idle OpenBLAS workers spin in sched_yield), and on this
  // 2-core machine a torch step gets slower than with 1 thread. So for
  // N > 1 torch also runs with OpenBLAS at 1 thread during its steps, its
  // best setting here, and the ratios are against the faster of the two.
  std::unique_ptr<oracle::EagerTrainer> eagerOneBlas;
  if (options->threads > 1)
    eagerOneBlas = std::make_unique<oracle::EagerTrainer>(
        shape, weights, batch, seq, adamw, oracle::Precision::Float32);

  // The engines take turns step by step rather than each running all its
  // steps in a block: load from elsewhere on the machine then falls on all
  // of them alike instead of on whichever block it coincides with.
  Timings kilnFp32, kilnBf16, torchEager, torchOneBlas;
  for (int i = 0; i < total; ++i) {
    double lr = 0;
    if (!kilnStep(*fp32Exec, *batches, i, kilnFp32, &lr) ||
        !kilnStep(*bf16Exec, *batches, i, kilnBf16, nullptr))
      return 1;
    // Torch takes Kiln's learning rate of the step (its warm-up and decay
    // schedule), so that later losses stay comparable too.
    auto torchStep = [&](oracle::EagerTrainer &trainer, Timings &timings) {
      Clock::time_point began = Clock::now();
      double loss = trainer.step(batches->tokens[i], batches->targets[i], lr);
      timings.seconds.push_back(secondsSince(began));
      timings.losses.push_back(loss);
    };
    torchStep(eager, torchEager);
    if (eagerOneBlas) {
      // Kiln's kernels are idle meanwhile: only OpenBLAS's count matters.
      cpu::setCpuThreads(1);
      torchStep(*eagerOneBlas, torchOneBlas);
      cpu::setCpuThreads(options->threads);
    }
  }

  size_t parameters = 0;
  for (const auto &[name, values] : weights)
    parameters += values.size();
  std::printf("%s: %zu parameters, batch %lld x seq %lld (%lld tokens/step), "
              "%d thread%s, %d timed steps after %d warm-up\n",
              options->model.c_str(), parameters, static_cast<long long>(batch),
              static_cast<long long>(seq), static_cast<long long>(batch * seq),
              options->threads, options->threads == 1 ? "" : "s",
              options->steps, kWarmupSteps);
  std::printf("loss at step 1: Kiln fp32 %.6f, LibTorch fp32 %.6f, Kiln bf16 "
              "%.6f\n",
              kilnFp32.losses.front(), torchEager.losses.front(),
              kilnBf16.losses.front());
  std::printf("loss at step %d: Kiln fp32 %.6f, LibTorch fp32 %.6f, Kiln bf16 "
              "%.6f\n\n",
              total, kilnFp32.losses.back(), torchEager.losses.back(),
              kilnBf16.losses.back());

  std::vector<Row> rows = {
      summarize("Kiln fp32", kilnFp32.seconds),
      summarize("Kiln bf16 (default policy)", kilnBf16.seconds),
      summarize("LibTorch eager fp32", torchEager.seconds)};
  if (eagerOneBlas)
    rows.push_back(
        summarize("LibTorch eager fp32, 1 BLAS thread", torchOneBlas.seconds));
  const Row *reference = &rows[2];
  if (eagerOneBlas && rows[3].median < reference->median)
    reference = &rows[3];
  std::printf("%-36s %10s %8s %9s %12s\n", "training step", "median ms",
              "min ms", "tokens/s", "vs LibTorch");
  for (const Row &r : rows)
    std::printf("%-36s %10.1f %8.1f %9.0f %11.2fx\n", r.name.c_str(),
                1e3 * r.median, 1e3 * r.min, batch * seq / r.median,
                reference->median / r.median);
  std::printf("\nvs LibTorch = median of \"%s\" / this median (above 1: "
              "faster than LibTorch)\n",
              reference->name.c_str());
  if (options->perStep) {
    std::printf("\nms per step (steps 1-%d warm up)\n%-6s %10s %10s %10s",
                kWarmupSteps, "step", "Kiln fp32", "Kiln bf16", "LibTorch");
    std::printf(eagerOneBlas ? " %10s\n" : "\n", "1 BLAS thr");
    for (int i = 0; i < total; ++i) {
      std::printf("%-6d %10.1f %10.1f %10.1f", i + 1, 1e3 * kilnFp32.seconds[i],
                  1e3 * kilnBf16.seconds[i], 1e3 * torchEager.seconds[i]);
      if (eagerOneBlas)
        std::printf(" %10.1f", 1e3 * torchOneBlas.seconds[i]);
      std::printf("\n");
    }
  }
  return 0;
}
