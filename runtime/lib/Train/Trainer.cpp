//===- Trainer.cpp - The training loop over a compiled plan ---------------===//
//
// Batches are a function of (seed, step) and the optimizer state is saved
// whole, so resuming from the checkpoint of step N repeats steps N+1, ...
// bit for bit on the same backend and thread count.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Train/Trainer.h"
#include "kiln/Runtime/Cpu/Common.h"
#include "kiln/Runtime/Executor.h"
#include "kiln/Runtime/Support/AtomicFile.h"
#include "kiln/Runtime/Support/Files.h"
#include "kiln/Runtime/Trace.h"
#include "kiln/Runtime/Train/Checkpoint.h"
#include "kiln/Runtime/Train/Data.h"
#include "kiln/Runtime/Train/LossPlot.h"
#include "kiln/Runtime/Train/Signals.h"
#include "kiln/Runtime/Train/Stages.h"
#include "kiln/Runtime/Train/StepLog.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace kiln::runtime {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

int fail(const std::string &message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string formatDuration(double seconds) {
  char buf[32];
  int s = static_cast<int>(seconds + 0.5);
  std::snprintf(buf, sizeof buf, "%d:%02d:%02d", s / 3600, s / 60 % 60,
                s % 60);
  return buf;
}

/// Every core, shared among the ranks on this machine (Open MPI says how
/// many there are), so that oversubscribed ranks do not fight for cores.
int defaultThreads(comm::Communicator *c) {
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (!c || c->size() == 1)
    return cores;
  const char *local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  int perMachine = local ? std::atoi(local) : c->size();
  return std::max(1, cores / std::max(1, perMachine));
}

/// The stop signal some rank received (the largest number when they differ,
/// 0 when none), so that every rank stops at the same point and exits with
/// the same code. Every rank must call this at the same points; nothing on
/// success, else the communicator's error.
Error agreeOnStop(comm::Communicator *c, int &signal) {
  signal = stopSignal();
  if (!c || c->size() == 1)
    return Error::success();
  float mine = static_cast<float>(signal), any = 0.0f;
  comm::CommHandle h = c->startAllReduce(&mine, &any, 1, comm::ElementType::F32,
                                         comm::ReduceOp::Max);
  if (Error failure = c->wait(h))
    return failure;
  signal = static_cast<int>(any);
  return Error::success();
}

/// What one rank feeds the plan's [batch, seq] tokens and targets: its
/// dp_shard position's rows of the global batch (dp_shard x batch rows,
/// drawn as one rank would draw them all) and, under tensor parallel, its
/// tp slice of their positions (the plan's inputs are `tp_shard` dim 1:
/// seq is the slice's length, the model's sequence seq x tp).
class RankBatch {
public:
  RankBatch(const Plan &plan, int rank) {
    const PlanValue *tokens = plan.named(PlanValue::Input, "tokens");
    batch = tokens->shape[0];
    seq = tokens->shape[1];
    wholeSeq = wholeShape(plan, tokens->shape, tokens->tp)[1];
    dpIndex = plan.mesh.axisIndex(plan::Axis::DpShard, rank);
    dpRanks = plan.mesh.dpShard;
    tpIndex = tokens->tp ? tokens->tp->index : 0;
    in.resize(batch * seq);
    tg.resize(batch * seq);
    if (wholeSeq != seq) {
      wholeIn.resize(batch * wholeSeq);
      wholeTg.resize(batch * wholeSeq);
    }
  }

  /// Batch `counter` of tokens[begin, end), into `in` and `tg`.
  void fill(const std::vector<uint32_t> &tokens, size_t begin, size_t end,
            uint64_t seed, uint64_t counter) {
    if (seq == wholeSeq) { // no tp slice: the rows are the inputs
      fillBatch(tokens, begin, end, dpRanks * batch, seq, seed, counter,
                in.data(), tg.data(), dpIndex * batch, batch);
      return;
    }
    fillBatch(tokens, begin, end, dpRanks * batch, wholeSeq, seed, counter,
              wholeIn.data(), wholeTg.data(), dpIndex * batch, batch);
    for (int64_t b = 0; b < batch; ++b) {
      int64_t from = b * wholeSeq + tpIndex * seq;
      std::copy_n(wholeIn.begin() + from, seq, in.begin() + b * seq);
      std::copy_n(wholeTg.begin() + from, seq, tg.begin() + b * seq);
    }
  }

  /// The tokens one step trains on, over all ranks.
  int64_t globalTokens() const { return dpRanks * batch * wholeSeq; }

  int64_t batch = 0, seq = 0, wholeSeq = 0;
  std::vector<int32_t> in, tg;

private:
  int64_t dpIndex = 0, dpRanks = 1, tpIndex = 0;
  std::vector<int32_t> wholeIn, wholeTg;
};

/// Mean loss over `batches` fixed validation batches. A stop signal on any
/// rank abandons it between batches: then no loss is returned and `signal`
/// holds the signal.
Expected<std::optional<double>>
validationLoss(Executor &exec, comm::Communicator *c,
               const std::vector<uint32_t> &tokens, const Split &split,
               uint64_t seed, int64_t batches, int &signal) {
  RankBatch rows(exec.plan(), exec.rank());
  double sum = 0;
  for (int64_t i = 0; i < batches; ++i) {
    if (Error failure = agreeOnStop(c, signal))
      return Error("the ranks' agreement to go on: " + failure.message());
    if (signal)
      return std::optional<double>();
    rows.fill(tokens, split.validBegin, split.validEnd, seed,
              (uint64_t(1) << 40) + i);
    Expected<EntryOutputs> out = exec.run("eval_loss", rows.in, rows.tg, 1);
    if (!out)
      return out.takeError();
    sum += out->at("loss")[0];
  }
  return std::optional<double>(sum / batches);
}

} // namespace

Error startFromPretrained(const Plan &plan, Executor &exec,
                          comm::Communicator *pp, const std::string &path) {
  std::map<std::string, std::vector<int64_t>> model, optimizer;
  unshardedShapes(plan, model, optimizer);
  if (pp)
    if (Error failure = mergeStageShapes(model, *pp))
      return failure;
  Expected<std::vector<FloatTensor>> weights =
      loadPretrainedWeights(path, model);
  if (!weights)
    return Error("cannot load the initial weights: " +
                 weights.error().message());
  // Every state this rank holds, the weights replaced (a pp stage takes its
  // own layers' of the whole model's).
  Expected<std::vector<FloatTensor>> current = exec.unshardedState();
  if (!current)
    return current.takeError();
  std::map<std::string, const FloatTensor *> byName;
  for (const FloatTensor &t : *current)
    byName[t.name] = &t;
  for (const FloatTensor &t : *weights)
    if (byName.count(t.name))
      byName[t.name] = &t;
  if (Error problem = exec.setUnshardedState(byName))
    return Error(path + ": " + problem.message());
  return Error::success();
}

namespace {
class Run {
public:
  /// `pp`: the rank's pp axis under pipeline parallel, else null.
  Run(const Plan &plan, const TrainOptions &options, Executor &exec,
      comm::Communicator *pp)
      : plan(plan), options(options), exec(exec), pp(pp) {}

  Error save(int64_t step);
  Error restore(const std::string &dir, int64_t &step);
  /// Sets the model's weights from pretrained ones (loadPretrainedWeights);
  /// the optimizer state stays as initialized.
  Error startFrom(const std::string &path);

private:
  const Plan &plan;
  const TrainOptions &options;
  Executor &exec;
  comm::Communicator *pp;
};

Error Run::save(int64_t step) {
  Checkpoint c;
  c.step = step;
  c.metadata["seed"] = std::to_string(options.training.seed);
  Expected<std::vector<FloatTensor>> all = exec.unshardedState();
  if (!all)
    return all.takeError();
  // Pipeline parallel: rank 0's pp axis (dp_shard and tp position 0)
  // brings every stage's tensors to rank 0.
  if (pp && plan.mesh.axisIndex(plan::Axis::DpShard, exec.rank()) == 0 &&
      plan.mesh.axisIndex(plan::Axis::Tp, exec.rank()) == 0) {
    all = gatherStages(*std::move(all), *pp);
    if (!all)
      return all.takeError();
  }
  if (exec.rank() != 0)
    return Error::success();
  for (FloatTensor &t : *all)
    (isOptimizerState(t.name) ? c.optimizer : c.model).push_back(std::move(t));
  std::string dir = options.outDir + "/" + options.training.checkpointFolder +
                    "/step-" + std::to_string(step);
  if (!options.configText.empty())
    c.files["config.toml"] = options.configText;
  return saveCheckpoint(dir, c);
}

Error Run::restore(const std::string &path, int64_t &step) {
  Expected<std::string> dir =
      findCheckpoint(path, options.training.checkpointFolder);
  if (!dir)
    return Error("cannot resume: " + dir.error().message());
  std::map<std::string, std::vector<int64_t>> model, optimizer;
  unshardedShapes(plan, model, optimizer);
  // Pipeline parallel: the checkpoint is every stage's.
  if (pp)
    for (auto *shapes : {&model, &optimizer})
      if (Error failure = mergeStageShapes(*shapes, *pp))
        return failure;
  Expected<Checkpoint> c = loadCheckpoint(*dir, model, optimizer);
  if (!c)
    return c.takeError();
  std::map<std::string, const FloatTensor *> byName;
  for (const auto *part : {&c->model, &c->optimizer}) {
    if (Error bad = checkFinite(*dir, *part))
      return bad;
    for (const CheckpointTensor &t : *part)
      byName[t.name] = &t;
  }
  if (Error problem = exec.setUnshardedState(byName))
    return Error(*dir + ": " + problem.message());
  step = c->step;
  std::printf("resumed from %s (step %lld)\n", dir->c_str(),
              static_cast<long long>(step));
  return Error::success();
}

Error Run::startFrom(const std::string &path) {
  if (Error failure = startFromPretrained(plan, exec, pp, path))
    return failure;
  if (exec.rank() == 0)
    std::printf("loaded the initial weights from %s\n", path.c_str());
  return Error::success();
}

/// The step-N subfolders of `dir` (a checkpoint folder), by N.
std::map<int64_t, std::string> stepFolders(const std::string &dir) {
  std::map<int64_t, std::string> steps;
  std::error_code ec;
  for (const fs::directory_entry &e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    long long n = -1;
    char tail = 0;
    if (std::sscanf(name.c_str(), "step-%lld%c", &n, &tail) == 1 && n >= 0 &&
        fs::is_directory(e.path(), ec))
      steps[n] = e.path().string();
  }
  return steps;
}

/// Where this rank writes its trace: the --trace path, or, in a run of
/// several ranks, that path with `.rank<r>` before its extension.
std::string tracePathOf(const TrainOptions &options, int rank, int64_t ranks) {
  std::string path = options.tracePath;
  if (ranks <= 1)
    return path;
  size_t dot = path.rfind('.');
  std::string suffix = ".rank" + std::to_string(rank);
  return dot == std::string::npos || path.find('/', dot) != std::string::npos
             ? path + suffix
             : path.substr(0, dot) + suffix + path.substr(dot);
}

/// Before anything is loaded or computed: the run's output folder exists
/// (created) and holds no earlier run unless that is resumed or to be
/// overwritten; temporary files of killed writers are gone; the trace can
/// be written. Rank 0 alone looks at the folder; every rank checks its
/// trace. Fails with the one line to fail with.
Error prepareOutputs(const Plan &plan, const TrainOptions &options) {
  int rank = options.communicator ? options.communicator->rank() : 0;
  if (options.outDir.empty())
    return Error("the output folder (--out) must not be empty");
  if (!options.tracePath.empty())
    if (Error why = checkReplaceable(tracePathOf(options, rank, plan.ranks)))
      return Error("--trace: " + why.message());
  if (rank != 0)
    return Error::success();
  // Nothing is created yet (a run that fails on its data writes nothing),
  // but a folder that could not be is an error now, not after training.
  if (Error why = checkCreatableFolder(options.outDir))
    return Error("cannot create the output folder '" + options.outDir +
                 "': " + why.message());
  std::error_code ec;
  std::string checkpoints =
      options.outDir + "/" + options.training.checkpointFolder;
  std::map<int64_t, std::string> steps = stepFolders(checkpoints);
  bool metrics = fs::exists(options.outDir + "/metrics.jsonl", ec);
  if ((!steps.empty() || metrics) && options.resume.empty()) {
    if (!options.overwrite)
      return Error(
          "'" + options.outDir + "' holds an earlier run (" +
          (steps.empty() ? std::string("metrics.jsonl")
                         : "checkpoints up to step " +
                               std::to_string(steps.rbegin()->first)) +
          "); pass --resume " + options.outDir +
          " to continue it, --overwrite to replace it, or another --out");
    // --overwrite: what an earlier run wrote here, and only that.
    for (const auto &[n, dir] : steps)
      fs::remove_all(dir, ec);
    for (const char *file : {"metrics.jsonl", "loss.png", "config.toml"})
      fs::remove(options.outDir + "/" + file, ec);
    // Kiln's own event files only: the folder may be shared.
    if (!options.tensorBoardDir.empty())
      for (const fs::directory_entry &e :
           fs::directory_iterator(options.tensorBoardDir, ec)) {
        std::string name = e.path().filename().string();
        if (name.rfind("events.out.tfevents.", 0) == 0 && name.size() > 5 &&
            name.compare(name.size() - 5, 5, ".kiln") == 0)
          fs::remove(e.path(), ec);
      }
  }
  // Writers killed mid-save leave NAME.tmp.PID beside the file.
  removeStaleTemporaries(options.outDir);
  removeStaleTemporaries(checkpoints);
  for (const auto &[n, dir] : stepFolders(checkpoints))
    removeStaleTemporaries(dir);
  return Error::success();
}
} // namespace

const std::vector<std::string> &resumeFiles() {
  static const std::vector<std::string> files = {kModelCheckpointFile,
                                                 kOptimizerCheckpointFile};
  return files;
}

bool isCompleteCheckpoint(const std::string &dir,
                          const std::vector<std::string> &files) {
  std::error_code ec;
  for (const std::string &file : files)
    if (!fs::is_regular_file(dir + "/" + file, ec))
      return false;
  return true;
}

Expected<std::string> findCheckpoint(const std::string &path,
                                     const std::string &checkpointFolder,
                                     const std::vector<std::string> &files) {
  std::error_code ec;
  if (isCompleteCheckpoint(path, files))
    return path;
  if (!fs::is_directory(path, ec)) {
    return Error("no checkpoint: '" + path + "' is not a folder");
  }
  // A checkpoint folder of step-N folders, or a run's --out folder holding
  // one; the latest complete step wins (a writer killed mid-save leaves a
  // folder without model.safetensors, which is renamed into place last).
  for (const std::string &dir :
       {path, path + "/" + checkpointFolder}) {
    std::map<int64_t, std::string> steps = stepFolders(dir);
    for (auto it = steps.rbegin(); it != steps.rend(); ++it)
      if (isCompleteCheckpoint(it->second, files))
        return it->second;
  }
  std::string needed;
  for (size_t i = 0; i < files.size(); ++i)
    needed += (i == 0 ? "" : i + 1 == files.size() ? " and " : ", ") +
              files[i];
  return Error("no complete checkpoint in '" + path + "' (a folder holding " +
               needed + ", or step-N folders of them, or a run folder with " +
               checkpointFolder + "/)");
}

int runTraining(const Plan &plan, const TrainOptions &options) {
  const TrainingSpec &t = options.training;
  if (Error problem = prepareOutputs(plan, options))
    return fail(problem.message());
  const PlanValue *tokensValue = plan.named(PlanValue::Input, "tokens");
  if (!tokensValue || tokensValue->shape.size() != 2 ||
      !plan.entry("train_step") || !plan.entry("eval_loss"))
    return fail("the plan has no train_step/eval_loss over [batch, seq] "
                "tokens");
  // The model's sequence (a tp slice's times tp).
  int64_t batch = tokensValue->shape[0],
          seq = wholeShape(plan, tokensValue->shape, tokensValue->tp)[1];

  // Startup's parts, printed with the header (on a GPU, kernels and graphs
  // are built in the first step, whose time is printed with it).
  Clock::time_point started = Clock::now();
  Expected<Dataset> data = loadDataset(t.data, plan.vocabSize, seq);
  if (!data)
    return fail(data.error().message());
  double dataSeconds = secondsSince(started);
  const std::vector<uint32_t> &tokens = data->tokens;
  const Split &split = data->split;

  cpu::setCpuThreads(options.threads > 0 ? options.threads
                                         : defaultThreads(options.communicator));
  if (!options.cpuGemm.empty())
    if (Error error = cpu::setCpuGemm(options.cpuGemm))
      return fail(error.message());
  Clock::time_point creating = Clock::now();
  Expected<std::unique_ptr<Executor>> created = createExecutor(
      plan, options.backend, ExecutorOptions{options.cudaGraphs});
  if (!created)
    return fail(created.error().message());
  std::unique_ptr<Executor> exec = std::move(*created);
  exec->setCheckNumerics(options.checkNumerics);
  if (Error problem = exec->setCommunicator(options.communicator))
    return fail(problem.message());
  // A rank that stops without dying (SIGSTOP, a deadlock) must not hold the
  // others in a collective forever.
  if (t.commTimeoutSeconds < 0)
    return fail("the collective deadline (comm.train_timeout_seconds) must "
                "be 0 (none) or more seconds, got " +
                std::to_string(t.commTimeoutSeconds));
  if (options.communicator)
    options.communicator->setTimeout(t.commTimeoutSeconds);
  // Rank 0 speaks for the run; the others print only errors.
  const bool lead = exec->rank() == 0;
  if (!lead && !std::freopen("/dev/null", "w", stdout))
    return fail("cannot silence the output of rank " +
                std::to_string(exec->rank()));
  double backendSeconds = secondsSince(creating);
  uint64_t seed = static_cast<uint64_t>(t.seed);
  Clock::time_point initializing = Clock::now();
  if (Error problem = exec->initialize(seed))
    return fail(problem.message());
  double initSeconds = secondsSince(initializing);

  std::unique_ptr<Trace> trace;
  if (!options.tracePath.empty()) {
    trace = std::make_unique<Trace>(exec->rank());
    exec->setTrace(trace.get());
  }

  // Pipeline parallel: checkpoints gather the stages over the pp axis.
  Run run(plan, options, *exec, exec->pipelineCommunicator());
  int64_t done = 0;
  if (!options.resume.empty()) {
    if (Error failure = run.restore(options.resume, done))
      return fail(failure.message());
  } else if (!options.initialLoad.empty()) {
    Error failure = options.initialLoadModelOnly
                        ? run.startFrom(options.initialLoad)
                        : run.restore(options.initialLoad, done);
    if (failure)
      return fail(failure.message());
  }
  if (done > t.steps)
    return fail("the checkpoint is from step " + std::to_string(done) +
                ", past the " + std::to_string(t.steps) + " steps to train");

  std::error_code ec;
  fs::create_directories(options.outDir, ec);
  if (ec)
    return fail("cannot create '" + options.outDir + "': " + ec.message());
  // The run's model beside its metrics (kiln report shows it).
  if (lead && !options.configText.empty())
    if (Error failure = writeFileAtomically(options.outDir + "/config.toml",
                                            options.configText))
      return fail(failure.message());
  // Rank 0 writes the metrics; the others write to nowhere.
  std::string metricsPath =
      lead ? options.outDir + "/metrics.jsonl" : std::string("/dev/null");
  StepLog log;
  if (Error failure = log.open(metricsPath, lead ? done : 0,
                               lead ? options.tensorBoardDir : ""))
    return fail(failure.message());

  std::printf("%s%lld steps of %lldx%lld tokens, %zu tokens of data, %s, "
              "output in %s\n",
              options.title.c_str(), static_cast<long long>(t.steps),
              static_cast<long long>(batch), static_cast<long long>(seq),
              tokens.size(), exec->describe().c_str(), options.outDir.c_str());
  std::printf("startup: data %.1f s, backend %.1f s, initial weights %.1f s\n",
              dataSeconds, backendSeconds, initSeconds);
  if (options.modelFlopsPerToken > 0) {
    if (options.peakTflops > 0)
      std::printf("MFU against %s (%.1f TFLOP/s a device)",
                  options.peakSource.c_str(), options.peakTflops);
    else
      std::printf("no MFU: no peak known for this device (set "
                  "metrics.peak_tflops)");
    std::printf("; model FLOPs %.4g a token\n", options.modelFlopsPerToken);
  }
  if (log.board())
    std::printf("TensorBoard: %s\n", log.board()->path().c_str());
  std::fflush(stdout);

  // From here a SIGINT or SIGTERM stops the loop at the next step or
  // validation batch, on every rank, with a checkpoint.
  clearStopSignal();
  setStopPhase(StopPhase::Deferred);
  int stopping = 0; // the signal the ranks agreed to stop on
  std::string stoppedIn;
  int64_t saved = done; // the last step with a checkpoint
  auto save = [&](int64_t at) {
    StopPhase before = setStopPhase(StopPhase::Saving);
    Error failure = run.save(at);
    setStopPhase(before);
    return failure;
  };
  RankBatch rows(plan, exec->rank());
  auto began = Clock::now();
  int64_t step = done + 1;
  // The delayed FP8 recipe's histories start empty: a fresh run first
  // measures every cast's amax on the first step's batch (the step itself
  // then scales with them; a resumed run has them from its checkpoint).
  if (done == 0 && plan.entry("fp8_calibration")) {
    rows.fill(tokens, split.trainBegin, split.trainEnd, seed, 1);
    if (Expected<EntryOutputs> out =
            exec->run("fp8_calibration", rows.in, rows.tg, 1);
        !out)
      return fail("the FP8 calibration step: " + out.error().message());
  }
  for (; step <= t.steps; ++step) {
    // Ranks stop together: after the same step.
    if (Error failure = agreeOnStop(options.communicator, stopping))
      return fail("before step " + std::to_string(step) +
                  ": the ranks' agreement to go on: " + failure.message());
    if (stopping)
      break;
    rows.fill(tokens, split.trainBegin, split.trainEnd, seed, step);
    auto t0 = Clock::now();
    Expected<EntryOutputs> result =
        exec->run("train_step", rows.in, rows.tg, step);
    if (!result)
      return fail("step " + std::to_string(step) + ": " +
                  result.error().message() +
                  "; no checkpoint written for this step");
    double loss = result->at("loss")[0];
    double norm = result->at("grad_norm")[0];
    double lr = result->at("lr")[0];
    if (!std::isfinite(loss) || !std::isfinite(norm))
      return fail("step " + std::to_string(step) + ": the " +
                  (std::isfinite(loss) ? "gradient norm" : "loss") +
                  " is not finite");
    double tokensPerSecond = rows.globalTokens() / secondsSince(t0);
    if (step == done + 1)
      if (std::string memory = exec->memoryReport(); !memory.empty())
        std::printf("%s\n", memory.c_str());
    if (Error failure = log.step(
            measureStep(options, *exec, step, loss, lr, norm, tokensPerSecond)))
      return fail(failure.message());

    std::optional<double> valid;
    if (t.evalInterval > 0 && (step % t.evalInterval == 0 || step == t.steps)) {
      Expected<std::optional<double>> measured =
          validationLoss(*exec, options.communicator, tokens, split, seed,
                         t.evalSteps, stopping);
      if (!measured)
        return fail("validation at step " + std::to_string(step) + ": " +
                    measured.error().message());
      valid = *measured;
      if (!valid) {
        // The step is done, its validation abandoned: save the step.
        stoppedIn = " (its validation abandoned)";
        ++step;
        break;
      }
      if (Error failure = log.validation(step, *valid))
        return fail(failure.message());
    }

    bool checkpointNow =
        t.checkpointInterval > 0 && step % t.checkpointInterval == 0;
    if (checkpointNow || (step == t.steps && options.finalCheckpoint)) {
      if (Error failure = save(step))
        return fail("checkpoint at step " + std::to_string(step) + ": " +
                    failure.message());
      saved = step;
    }

    // Once a stop is asked for, nothing more goes to stdout before the
    // checkpoint is saved (see below).
    if (stopSignal())
      continue;
    double eta = secondsSince(began) / (step - done) * (t.steps - step);
    if (options.progressBar) {
      int width = 30;
      int filled = static_cast<int>(width * step / t.steps);
      std::printf("\r[%s%s] step %lld/%lld loss %.4f %.0f tok/s ETA %s   ",
                  std::string(filled, '#').c_str(),
                  std::string(width - filled, ' ').c_str(),
                  static_cast<long long>(step),
                  static_cast<long long>(t.steps), loss, tokensPerSecond,
                  formatDuration(eta).c_str());
      if (valid || step == t.steps)
        std::printf("\n");
    }
    if (!options.progressBar || valid) {
      std::printf("step %lld loss %.4f lr %.2e grad_norm %.3f %.0f tok/s",
                  static_cast<long long>(step), loss, lr, norm,
                  tokensPerSecond);
      if (valid)
        std::printf(" val_loss %.4f", *valid);
      std::printf("\n");
    }
    std::fflush(stdout);
  }
  log.close();

  int64_t last = step - 1;
  if (stopping) {
    // Save first, say so after. A launcher that is about to kill may no
    // longer read this rank's stdout: Open MPI's mpirun stops draining the
    // terminal it gives rank 0 while it waits to send SIGKILL, and drops
    // what is queued there (Signals.cpp makes writes to it fail rather than
    // block). Its stderr is a pipe mpirun still forwards, so under a
    // launcher the lines go there.
    FILE *says = comm::launchedByMpi() ? stderr : stdout;
    if (last > saved) {
      if (std::string note = launcherGraceNote(10); !note.empty() && lead)
        std::fprintf(stderr, "%s\n", note.c_str());
      if (Error failure = save(last))
        return fail("checkpoint at step " + std::to_string(last) + ": " +
                    failure.message());
    }
    if (lead) {
      std::fprintf(says, "\ninterrupted by %s after step %lld%s\n",
                   signalName(stopping), static_cast<long long>(last),
                   stoppedIn.c_str());
      if (last > done)
        std::fprintf(says, "checkpoint: %s/%s/step-%lld\n",
                     options.outDir.c_str(), t.checkpointFolder.c_str(),
                     static_cast<long long>(last));
      std::fflush(says);
    }
  } else if (last > done && saved == last) {
    std::printf("checkpoint: %s/%s/step-%lld\n", options.outDir.c_str(),
                t.checkpointFolder.c_str(), static_cast<long long>(last));
  }
  if (trace) {
    std::string path = tracePathOf(options, exec->rank(), plan.ranks);
    fs::path folder = fs::path(path).parent_path();
    std::error_code ec;
    if (!folder.empty())
      fs::create_directories(folder, ec);
    if (Error failure = trace->write(path))
      return fail("cannot write the trace: " + failure.message());
    std::printf("trace: %s (%zu events)\n", path.c_str(), trace->size());
  }
  std::string png = options.outDir + "/loss.png";
  int code = stopping ? 128 + stopping : 0;
  if (!lead)
    return code;
  if (Error failure = plotLossCurve(metricsPath, png))
    std::fprintf(stderr, "warning: no loss curve: %s\n",
                 failure.message().c_str());
  else
    std::printf("loss curve: %s\n", png.c_str());
  return code;
}

int runTrainingOnRanks(const Plan &plan, TrainOptions options,
                       comm::Communicator &ranks) {
  options.communicator = &ranks;
  int code = runTraining(plan, options);
  if (code != 0 && ranks.size() > 1) {
    std::fflush(stdout);
    std::fflush(stderr);
    // A failed collective (a deadline passed) may leave ranks that never
    // notice: one that is stopped, or waits in a collective that will not
    // complete. End them all; otherwise the launcher does when this exits.
    if (ranks.failure())
      ranks.abortRun(code);
    std::_Exit(code);
  }
  return code;
}

} // namespace kiln::runtime
