//===- kiln.cpp - The kiln command-line tool ------------------------------===//
//
// Parses the command line (CLI11) and hands each subcommand to the driver.
// Bad flags are one line on stderr and exit code 1.
//
//===----------------------------------------------------------------------===//

#include "kiln/Driver/Driver.h"
#include "kiln/Runtime/Cpu/Common.h"
#include "kiln/Runtime/Executor.h"
#include "kiln/Runtime/Plan/Format.h"

#include <CLI/CLI.hpp>

#include <iostream>

#include "llvm/Support/raw_ostream.h"

#ifndef KILN_GIT_HASH
#define KILN_GIT_HASH "unknown"
#endif

int main(int argc, char **argv) {
  // An option given as "" (--out "") is an error, not the default.
  CLI::Validator nonEmpty(
      [](std::string &value) {
        return value.empty() ? std::string("must not be empty")
                             : std::string();
      },
      "", "non-empty");
  CLI::App app{"Kiln: a JIT compiler for transformer training steps"};
  app.set_version_flag("--version", "kiln " KILN_GIT_HASH);
  app.require_subcommand(1);
  app.footer("MODEL is a model file (TOML) or a preset name; "
             "`kiln config --presets` lists the presets.");

  kiln::CompileCommand compile;
  CLI::App *compileCmd =
      app.add_subcommand("compile", "Compile a model's training step");
  compileCmd->add_option("MODEL", compile.model, "Model file or preset")
      ->required();
  compileCmd->add_option("--emit", compile.emit,
                         "Stop after this phase and print its IR "
                         "(import, tp, train, precision, shard, fp8, "
                         "accumulate, fuse, schedule, plan)");
  compileCmd->add_option("-o,--output", compile.output,
                         "Write the result here instead of stdout");
  compileCmd->add_option("--dump-ir-to", compile.dumpDir,
                         "Write each phase's IR as DIR/NN-<phase>.mlir");
  compileCmd->add_option("--set", compile.overrides,
                         "Override a key: section.key=value (repeatable)");
  compileCmd
      ->add_option("--world-size", compile.worldSize,
                   "Compile one rank's step of a run over N ranks, "
                   "the mesh pp x dp_shard x tp (default 1)")
      ->check(CLI::Range(int64_t(1), int64_t(65536)));
  compileCmd
      ->add_option("--rank", compile.rank,
                   "Which rank of the run to compile: its tp and pp "
                   "positions decide its slices and stages (default 0)")
      ->check(CLI::Range(int64_t(0), int64_t(65535)));
  compileCmd->add_flag("!--no-fuse", compile.fuse,
                       "Skip the fuse phase: every elementwise op is its own "
                       "group in the plan");
  compileCmd->allow_extras();
  compileCmd->footer("MLIR's own flags (--mlir-print-ir-after-all, "
                     "--mlir-print-debuginfo, ...) are accepted too.");

  kiln::ConfigCommand config;
  CLI::App *configCmd = app.add_subcommand(
      "config", "Print a model's effective configuration, or the schema");
  configCmd->add_option("MODEL", config.model, "Model file or preset");
  configCmd->add_option("--set", config.overrides,
                        "Override a key: section.key=value (repeatable)");
  configCmd->add_flag("--source", config.source,
                      "Print the model's text instead of the effective keys");
  configCmd->add_flag("--markdown", config.markdown,
                      "Print every key as Markdown (docs/config.md)");
  configCmd->add_flag("--presets", config.presets, "List the presets");
  configCmd
      ->add_option("--from-hf", config.fromHf,
                   "Print the model file of a Hugging Face Llama model "
                   "folder (its config.json; the folder becomes "
                   "checkpoint.initial_load_path)")
      ->check(nonEmpty);

  kiln::TrainCommand train;
  CLI::App *trainCmd = app.add_subcommand(
      "train", "Compile (cached) and run training steps (CPU or CUDA backend)");
  trainCmd->add_option("MODEL", train.model,
                       "Model file or preset (default llama3-debug)");
  trainCmd->add_option("--steps", train.steps, "Steps (training.steps)")
      ->check(CLI::Range(int64_t(1), kiln::plan::kMaxTrainingSteps));
  trainCmd->add_option("--data", train.data,
                       "Text or token file (training.data; default: the "
                       "fortunes)");
  trainCmd->add_option("--out", train.out,
                       "Output folder (default runs/<model>)")
      ->check(nonEmpty);
  trainCmd->add_option("--set", train.overrides,
                       "Override a key: section.key=value (repeatable)");
  trainCmd->add_option("--resume", train.resume,
                       "Continue from a checkpoint folder, or the latest "
                       "complete step-N checkpoint under a folder or a run's "
                       "--out folder");
  trainCmd->add_flag("--overwrite", train.overwrite,
                     "Replace an earlier run in the --out folder (its "
                     "checkpoints, metrics and loss curve)");
  trainCmd->add_option("--threads", train.threads,
                       "CPU threads (default: every core)")
      ->check(CLI::Range(1, 1024));
  trainCmd
      ->add_option("--cpu-gemm", train.cpuGemm,
                   "CPU backend GEMMs: openblas (the default where built) "
                   "or portable (Kiln's loops: the same bits whatever the "
                   "row count)")
      ->check(CLI::IsMember(kiln::runtime::cpu::cpuGemmLibraries()));
  trainCmd->add_option("--trace", train.trace,
                       "Write a Chrome trace of every step (compute and "
                       "communication tracks) to FILE");
  trainCmd->add_option("--backend", train.backend,
                       "Where the step runs: cpu (default) or cuda")
      ->check(CLI::IsMember(kiln::runtime::executorBackends()));
  trainCmd->add_flag("!--no-cuda-graphs", train.cudaGraphs,
                     "CUDA: launch every op of every step instead of "
                     "replaying a CUDA graph");
  trainCmd->add_flag("!--no-check-numerics", train.checkNumerics,
                     "Check only the loss and gradient norm for NaN/Inf, "
                     "not every op's result (then a failure cannot name "
                     "the op)");

  kiln::ExplainCommand explain;
  CLI::App *explainCmd = app.add_subcommand(
      "explain", "What a compiled step costs: --memory (bytes per rank), "
                 "--fp8 (which linears run in FP8), --schedule (the "
                 "pipeline schedule and its bubble), --perf (the step's "
                 "time on a GPU cluster)");
  explainCmd->add_option("MODEL", explain.model, "Model file or preset")
      ->required();
  explainCmd->add_flag("--memory", explain.memory,
                       "Per-rank bytes: parameters, optimizer state, the "
                       "step's arena and what is live at its peak, "
                       "collective traffic");
  explainCmd->add_flag("--fp8", explain.fp8,
                       "One row per linear: its GEMM, FP8 or BF16 and why; "
                       "all-gather bytes with and without FP8 all-gather");
  explainCmd->add_flag("--schedule", explain.schedule,
                       "Pipeline parallel: each rank's units (forward or "
                       "backward of a microbatch on a stage) as a text "
                       "timeline, and the bubble fraction");
  explainCmd->add_flag("--perf", explain.perf,
                       "The step's predicted time on a GPU cluster: step "
                       "time, tokens/s per GPU, MFU, peak memory, exposed "
                       "communication, the costliest ops "
                       "(docs/perf-model.md)");
  explainCmd->add_option("--hardware", explain.hardware,
                         "--perf: a built-in GPU (h100-sxm, h200, "
                         "h100-hbm2e-500w) or a .toml file (default "
                         "h100-sxm)");
  explainCmd->add_option("--efficiency", explain.efficiency,
                         "--perf: an efficiency profile, built in or a "
                         ".toml file (default torchtitan-h100-2024)");
  explainCmd->add_flag("!--no-cuda-graphs", explain.cudaGraphs,
                       "--perf: launch each kernel eagerly");
  explainCmd->add_flag("--json", explain.json,
                       "--perf: one JSON object instead of text");
  explainCmd->add_flag("!--no-fuse", explain.fuse,
                       "--perf: as eager PyTorch: the plan without the fuse "
                       "phase, every elementwise op its own kernel, and the "
                       "ops PyTorch decomposes moving what the profile's "
                       "[eager] says");
  explainCmd->add_flag("--eager-loss", explain.eagerLoss,
                       "--perf: the loss alone as eager PyTorch runs it "
                       "(TorchTitan's compiled rows): moving what the "
                       "profile's [eager] says, and holding what its "
                       "[eager_held] says at its gradient");
  explainCmd
      ->add_option("--world-size,--gpus", explain.worldSize,
                   "Ranks of the run, the mesh pp x dp_shard x tp "
                   "(default 1)")
      ->check(CLI::Range(int64_t(1), int64_t(65536)));
  explainCmd->add_option("--set", explain.overrides,
                         "Override a key: section.key=value (repeatable)");

  kiln::PlanCommand plan;
  CLI::App *planCmd = app.add_subcommand(
      "plan", "The parallelism to train with: every mesh dp_shard x tp x pp "
              "of the GPUs, pipeline schedule, activation checkpointing and "
              "FP8 recipe, predicted as explain --perf predicts; those that "
              "fit ranked by tokens/s per GPU (docs/perf-model.md)");
  planCmd->add_option("MODEL", plan.model, "Model file or preset")
      ->required();
  planCmd->add_option("--gpus", plan.gpus, "GPUs of the run (default 8)")
      ->check(CLI::Range(int64_t(1), int64_t(65536)));
  planCmd->add_option("--hardware", plan.hardware,
                      "A built-in GPU (h100-sxm, h200, h100-hbm2e-500w) or a "
                      ".toml file (default h100-sxm)");
  planCmd->add_option("--efficiency", plan.efficiency,
                      "An efficiency profile, built in or a .toml file "
                      "(default torchtitan-h100-2024)");
  planCmd->add_option("--seq", plan.seqLen,
                      "Sequence length (default: the model file's)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 24));
  planCmd->add_option("--global-batch", plan.globalBatch,
                      "Sequences per step (default: the model file's, at "
                      "least one per GPU)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 24));
  planCmd->add_option("--top", plan.top, "How many to list (default 5)")
      ->check(CLI::Range(int64_t(1), int64_t(100)));
  planCmd->add_flag("--exact", plan.exact,
                    "Compile the finalists whole instead of extrapolating "
                    "from 3 and 4 layers per stage (slower)");
  planCmd->add_flag("--json", plan.json, "One JSON object instead of text");
  planCmd->add_option("--threads", plan.threads,
                      "Configurations compiled at once (default: one per "
                      "core)")
      ->check(CLI::Range(int64_t(1), int64_t(256)));
  planCmd->add_option("--set", plan.overrides,
                      "Override a key of the model: section.key=value "
                      "(repeatable; the planner sets the keys it searches)");

  kiln::SampleCommand sample;
  CLI::App *sampleCmd = app.add_subcommand(
      "sample", "Print text generated by a trained model from a checkpoint");
  sampleCmd->add_option("CHECKPOINT", sample.checkpoint,
                        "A checkpoint folder (step-N), a folder of them, or "
                        "a run folder (its latest checkpoint)")
      ->required();
  sampleCmd->add_option("--prompt", sample.prompt, "Text to continue")
      ->required();
  sampleCmd
      ->add_option("--tokens", sample.tokens,
                   "Tokens to generate (default 200)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 20));
  sampleCmd->add_option("--temperature", sample.temperature,
                        "Softmax temperature; 0 picks the most likely token "
                        "(default 0.8)");
  sampleCmd
      ->add_option("--top-k", sample.topK,
                   "Draw among the k most likely tokens (default: all)")
      ->check(CLI::NonNegativeNumber);
  // Seeds are integers in [0, 2^53] everywhere (training.seed too): each
  // one a double holds exactly, none wrapped or clamped.
  sampleCmd->add_option("--seed", sample.seed, "Random seed (default 0)")
      ->check(CLI::Range(uint64_t(0), uint64_t(1) << 53));
  sampleCmd->add_option("--threads", sample.threads,
                        "CPU threads (default: every core)")
      ->check(CLI::Range(1, 1024));

  sampleCmd->add_option("--tokenizer", sample.tokenizer,
                        "A Hugging Face tokenizer.json the model was trained "
                        "with (kiln tokenize): the prompt is encoded and the "
                        "tokens decoded with it (default: bytes)");

  kiln::TokenizeCommand tokenize;
  std::string separator = "\x01unset";
  CLI::App *tokenizeCmd = app.add_subcommand(
      "tokenize", "Encode text and JSONL files with a Hugging Face tokenizer "
                  "into llm.c token shards (train_*.bin, val_*.bin) for "
                  "--data (docs/training.md)");
  tokenizeCmd
      ->add_option("INPUT", tokenize.inputs,
                   "Text files (each a document) and .jsonl files "
                   "(each line an object with a text field)")
      ->required();
  tokenizeCmd
      ->add_option("--tokenizer", tokenize.tokenizer,
                   "A Hugging Face tokenizer.json")
      ->required();
  tokenizeCmd
      ->add_option("-o,--out", tokenize.out,
                   "The folder of shards (new or empty)")
      ->required();
  tokenizeCmd->add_option("--field", tokenize.field,
                          "The field of a JSONL line that holds its text "
                          "(default text)");
  tokenizeCmd->add_option("--val-fraction", tokenize.valFraction,
                          "Share of the pieces (documents, 64 KiB of a text "
                          "file) in the validation shards, the first piece "
                          "always (default 0.01)");
  tokenizeCmd
      ->add_option("--shard-tokens", tokenize.shardTokens,
                   "Tokens per shard at most (default 100000000)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 31));
  tokenizeCmd->add_option("--separator", separator,
                          "The token before each document; '' for none "
                          "(default: the first of <|end_of_text|>, "
                          "<|endoftext|>, </s>, <eos> in the vocabulary)");

  kiln::ReportCommand report;
  CLI::App *reportCmd = app.add_subcommand(
      "report", "Write a run's metrics and model as one self-contained HTML "
                "page (plots of loss, learning rate, gradient norm, "
                "throughput and MFU)");
  reportCmd->add_option("RUN", report.run, "A kiln train output folder")
      ->required();
  reportCmd->add_option("-o,--out", report.out,
                        "The page to write (default RUN/report.html)");

  auto named = [&](const CLI::App *sub) { return sub->get_name() == argv[1]; };
  if (argc > 1 && argv[1][0] != '-' && app.get_subcommands(named).empty()) {
    std::cerr << "error: unknown command '" << argv[1]
              << "'; commands: compile, config, train, sample, tokenize, "
                 "report, explain, plan (see kiln --help)\n";
    return 1;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success &e) {
    return app.exit(e);
  } catch (const CLI::ParseError &e) {
    std::cerr << "error: " << e.what() << " (see kiln --help)\n";
    return 1;
  }

  auto run = [&]() -> int {
    if (compileCmd->parsed()) {
      for (const std::string &extra : compileCmd->remaining()) {
        if (extra.rfind("--mlir-", 0) != 0) {
          std::cerr << "error: unknown argument '" << extra
                    << "' (see kiln compile --help)\n";
          return 1;
        }
        compile.mlirFlags.push_back(extra);
      }
      return kiln::runCompile(compile);
    }
    if (trainCmd->parsed())
      return kiln::runTrain(train);
    if (sampleCmd->parsed())
      return kiln::runSample(sample);
    if (reportCmd->parsed())
      return kiln::runReport(report);
    if (tokenizeCmd->parsed()) {
      if (separator != "\x01unset")
        tokenize.separator = separator;
      return kiln::runTokenize(tokenize);
    }
    if (explainCmd->parsed())
      return kiln::runExplain(explain);
    if (planCmd->parsed())
      return kiln::runPlan(plan);
    return kiln::runConfig(config);
  };
  int code = run();
  // Output that could not be written (`> /dev/full`, a closed pipe) is one
  // error line and exit 1, not LLVM's "IO failure" abort at exit.
  llvm::outs().flush();
  std::cout.flush();
  if (llvm::outs().has_error() || !std::cout) {
    std::error_code ec = llvm::outs().error();
    llvm::outs().clear_error();
    std::cerr << "error: cannot write the output: "
              << (ec ? ec.message() : std::string("write failed")) << "\n";
    return 1;
  }
  return code;
}
