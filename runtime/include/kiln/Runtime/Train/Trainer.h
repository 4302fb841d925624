//===- Trainer.h - The training loop over a compiled plan -------*- C++ -*-===//
//
// What `kiln train` runs after compiling and what `kiln-run PLAN` runs
// without the compiler: data, the steps of the plan's train_step entry,
// validation through eval_loss, metrics, checkpoints, resume, the loss
// curve. Messages go to stdout (progress) and stderr (errors, one line
// each, prefixed "error: ").
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TRAIN_TRAINER_H
#define KILN_RUNTIME_TRAIN_TRAINER_H

#include "kiln/Runtime/Comm/Communicator.h"
#include "kiln/Runtime/Executor.h"
#include "kiln/Runtime/Plan.h"

#include <string>
#include <vector>

namespace kiln::runtime {

struct TrainOptions {
  /// Steps, seed, data, evaluation and checkpoint cadence: the plan's, with
  /// whatever the command line changed.
  TrainingSpec training;
  /// Folder for metrics.jsonl, loss.png and the checkpoint folder.
  std::string outDir;
  /// A checkpoint folder (holding model.safetensors) or a folder of
  /// step-N checkpoints (the latest is taken); empty to start fresh.
  std::string resume;
  /// Without `resume`: pretrained weights to start from at step 0 (a
  /// Hugging Face model folder or .safetensors file,
  /// loadPretrainedWeights); empty: the plan's initialization.
  std::string initialLoad;
  /// false: `initialLoad` is a Kiln checkpoint, restored whole (its step
  /// and optimizer state) as `resume` would, the output folder still new.
  bool initialLoadModelOnly = true;
  /// Saved as config.toml next to each checkpoint, so that `kiln sample`
  /// can rebuild the model; empty when not known (kiln-run).
  std::string configText;
  /// Printed in the first line.
  std::string title;
  /// The backend that runs the plan: "cpu" or "cuda" (Executor.h).
  std::string backend = "cpu";
  /// CUDA: replay steps as CUDA graphs after the first.
  bool cudaGraphs = true;
  /// Threads of the CPU backend; 0 keeps the default (every core).
  int threads = 0;
  /// The CPU backend's GEMM library (cpu::cpuGemmLibraries()); empty keeps
  /// the build's default.
  std::string cpuGemm;
  /// Check every op's result for NaN and infinity, so a failure names the
  /// op; otherwise only the loss and gradient norm are checked.
  bool checkNumerics = true;
  /// Draw the progress bar (a terminal) or print plain lines.
  bool progressBar = false;
  /// The ranks of a plan compiled for more than one (not owned). Every rank
  /// trains on its share of each global batch; rank 0 alone prints, writes
  /// metrics, the loss curve and checkpoints (in the unsharded layout,
  /// gathered from every rank).
  comm::Communicator *communicator = nullptr;
  /// Replace an earlier run in `outDir` (its step-N checkpoints, metrics
  /// and loss curve); without it, or `resume`, such a folder is refused.
  bool overwrite = false;
  /// Save a checkpoint after the last step (the interval's and a stop
  /// signal's are saved either way). Off for benchmarks, which time steps
  /// and would otherwise write the whole state at the end.
  bool finalCheckpoint = true;
  /// Write a Chrome trace of every step here (each rank of a multi-rank
  /// run its own file, `.rank<r>` before the extension); empty for none.
  std::string tracePath;
  /// Model FLOPs of one trained token (forward and backward, attention
  /// included, recomputation not), for the TFLOP/s and MFU of each step;
  /// 0: neither is reported (kiln-run, which has no model description).
  double modelFlopsPerToken = 0;
  /// One device's peak TFLOP/s, the denominator of MFU, and where it comes
  /// from ("metrics.peak_tflops", "h100-sxm dense BF16"); 0: no MFU.
  double peakTflops = 0;
  std::string peakSource;
  /// Also write the step metrics as TensorBoard event files here; empty
  /// for none.
  std::string tensorBoardDir;
};

/// Trains; returns the process exit code (0 done, 1 an error already
/// reported, 130 or 143 stopped by SIGINT or SIGTERM after saving a
/// checkpoint). SIGINT and SIGTERM (Signals.h) stop the loop before the next
/// step or validation batch on every rank, whichever rank got the signal.
/// Collectives get the deadline `training.commTimeoutSeconds` (0: none).
int runTraining(const Plan &plan, const TrainOptions &options);

/// runTraining as one of `ranks`. When it fails with other ranks in the
/// run, the process leaves at once (output flushed, no destructors): the
/// others may be inside a collective this rank will never join, and the
/// launcher ends them when this one exits. When the communicator failed
/// (a collective's deadline passed), every rank is ended (abortRun).
int runTrainingOnRanks(const Plan &plan, TrainOptions options,
                       comm::Communicator &ranks);

/// What a checkpoint folder must hold to resume from: model.safetensors
/// and optimizer.safetensors. A save renames model.safetensors into place
/// last, after the optimizer state and config.toml, so a folder holding it
/// was written whole.
const std::vector<std::string> &resumeFiles();

/// Whether `dir` holds each of `files` as a regular file.
bool isCompleteCheckpoint(const std::string &dir,
                          const std::vector<std::string> &files);

/// The checkpoint folder `path` names: itself if it holds a complete
/// checkpoint; else, of its step-N subfolders, the complete one with the
/// largest N; else the same in `path/<checkpointFolder>` (a run's --out
/// folder). Complete: holding `files`; incomplete folders (a save killed
/// halfway) are skipped.
Expected<std::string>
findCheckpoint(const std::string &path,
               const std::string &checkpointFolder = "checkpoints",
               const std::vector<std::string> &files = resumeFiles());

/// Sets the model's weights of `exec`, which runs `plan`, from pretrained
/// ones (loadPretrainedWeights: a Hugging Face model folder or a
/// .safetensors file), each rank keeping its shard; the other state (the
/// optimizer's) stays as it is. Every rank calls it at the same point
/// (`pp`: the rank's pp axis under pipeline parallel, else null).
Error startFromPretrained(const Plan &plan, Executor &exec,
                          comm::Communicator *pp, const std::string &path);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_TRAIN_TRAINER_H
