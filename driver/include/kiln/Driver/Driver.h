//===- Driver.h - What the `kiln` subcommands do ----------------*- C++ -*-===//
//
// The `kiln` tool only parses its command line; each subcommand is one
// function here returning the process exit code (0, or 1 with a message).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DRIVER_DRIVER_H
#define KILN_DRIVER_DRIVER_H

#include <optional>
#include <string>
#include <vector>

namespace kiln {

struct CompileCommand {
  std::string model;                  // path or preset
  std::string emit;                   // stop after this phase and print it
  std::string output;                 // -o; empty: stdout
  std::string dumpDir;                // --dump-ir-to
  std::vector<std::string> overrides; // --set section.key=value
  std::vector<std::string> mlirFlags; // --mlir-* passed to MLIR
  bool fuse = true;                   // run the fuse phase
  int64_t worldSize = 1;              // ranks of the run (pp x dp_shard x tp)
  int64_t rank = 0;                   // the rank compiled (--rank)
};
int runCompile(const CompileCommand &command);

struct ConfigCommand {
  std::string model;
  std::vector<std::string> overrides;
  bool markdown = false; // print docs/config.md
  bool source = false;   // print the model's source text
  bool presets = false;  // list the presets
  std::string fromHf;    // a Hugging Face model folder to convert
};
int runConfig(const ConfigCommand &command);
/// `kiln config --from-hf DIR`: the model file of the Hugging Face
/// Llama-family model in DIR (its config.json), printed (HfConfig.cpp).
int runConfigFromHf(const std::string &dir);

struct TrainCommand {
  std::string model = "llama3-debug";
  int64_t steps = 0;                  // 0: training.steps
  std::string data;                   // empty: training.data
  std::string out;                    // empty: runs/<model>
  std::vector<std::string> overrides; // --set section.key=value
  std::string resume;                 // checkpoint to continue from
  bool overwrite = false;             // replace an earlier run in `out`
  int threads = 0;                    // 0: every core
  std::string cpuGemm;                // empty: the build's default
  bool checkNumerics = true;          // name the op of a NaN/Inf
  std::string trace;                  // Chrome trace file; empty: none
  std::string backend = "cpu";        // cpu or cuda
  bool cudaGraphs = true;             // CUDA: replay steps as graphs
};
int runTrain(const TrainCommand &command);

struct ExplainCommand {
  std::string model;
  std::vector<std::string> overrides;
  int64_t worldSize = 1;
  bool memory = false; // per-rank bytes of the training step
  bool fp8 = false;    // which linears run in FP8, and why
  bool schedule = false; // the pipeline schedule per rank, and its bubble
  bool perf = false;     // the step's predicted time on a GPU cluster
  std::string hardware = "h100-sxm";               // --hardware (perf/hardware)
  std::string efficiency = "torchtitan-h100-2024"; // --efficiency
  bool cudaGraphs = true; // launches inside CUDA graphs
  bool fuse = true;       // --perf of the plan without the fuse phase (eager)
  bool eagerLoss = false; // --perf with the loss as eager PyTorch runs it
  bool json = false;      // --perf as one JSON object
};
int runExplain(const ExplainCommand &command);
/// `kiln explain --schedule` (ExplainSchedule.cpp).
int explainSchedule(const ExplainCommand &command);
/// `kiln explain --perf` (ExplainPerf.cpp).
int explainPerf(const ExplainCommand &command);

/// `kiln plan` (PlanSearch.cpp): the parallelism, schedule, activation
/// checkpointing and FP8 recipe with the best predicted throughput that
/// fits.
struct PlanCommand {
  std::string model;
  std::vector<std::string> overrides;
  int64_t gpus = 8;
  std::string hardware = "h100-sxm";
  std::string efficiency = "torchtitan-h100-2024";
  int64_t seqLen = 0;      // 0: the model file's
  int64_t globalBatch = 0; // 0: the model file's, at least one per GPU
  int64_t top = 5;
  bool exact = false; // the finalists compiled whole, not extrapolated
  bool json = false;
  int64_t threads = 0; // 0: one per core
};
int runPlan(const PlanCommand &command);

struct SampleCommand {
  std::string checkpoint;   // a checkpoint, or a folder of them, or a run
  std::string prompt;
  int64_t tokens = 200;     // how many to generate
  double temperature = 0.8; // 0: greedy
  int64_t topK = 0;         // 0: every token
  uint64_t seed = 0;
  int threads = 0;          // 0: every core
  std::string tokenizer;    // a tokenizer.json; empty: bytes (vocab 256)
};
int runSample(const SampleCommand &command);

struct TokenizeCommand {
  std::string tokenizer;                // a Hugging Face tokenizer.json
  std::vector<std::string> inputs;      // text files and .jsonl files
  std::string out;                      // the folder of shards
  std::string field = "text";           // the document of a JSONL line
  double valFraction = 0.01;            // of the pieces, to validation
  int64_t shardTokens = 100000000;      // tokens per shard at most
  std::optional<std::string> separator; // unset: the tokenizer's EOS-like
};
int runTokenize(const TokenizeCommand &command);

struct ReportCommand {
  std::string run; // a kiln train output folder
  std::string out; // empty: RUN/report.html
};
int runReport(const ReportCommand &command);

} // namespace kiln

#endif // KILN_DRIVER_DRIVER_H
