//===- PipelineOrder.h - Pipeline schedules as unit orders ------*- C++ -*-===//
//
// The one place that says what each pipeline schedule runs, on which rank
// and in which order (docs/pp.md, "Schedules"). A unit is the forward or
// the backward of one microbatch on one stage; stage s runs on pp rank
// s % pp. kiln-pipeline-schedule orders each rank's IR by these lists and
// places its transfers' waits from their simulated times;
// `kiln explain --schedule` draws them and states the bubble. No MLIR here:
// plain data, so both can use it.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TRANSFORMS_PIPELINEORDER_H
#define KILN_TRANSFORMS_PIPELINEORDER_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::pipeline {

enum class Schedule { GPipe, OneFOneB, Interleaved1F1B };

/// The schedule called `name` (the config's spelling), if any.
std::optional<Schedule> parseSchedule(const std::string &name);

struct Unit {
  bool backward = false;
  int64_t microbatch = 0;
  int64_t stage = 0;

  bool operator==(const Unit &o) const {
    return backward == o.backward && microbatch == o.microbatch &&
           stage == o.stage;
  }
};

/// "F3s1" / "B3s1": for messages, the text timeline and the `kiln.unit`
/// annotation kiln-pipeline-schedule leaves on each unit's ops.
std::string describe(const Unit &unit);
/// The unit `describe` wrote, if `text` is one.
std::optional<Unit> parseUnit(const std::string &text);

struct Shape {
  int64_t pp = 1;     // ranks of the pp axis
  int64_t stages = 1; // stages in all: a multiple of pp
  int64_t microbatches = 1;
};

/// Each pp rank's units in the order it runs them. With `forwardOnly`,
/// only the forwards, in the order the schedule runs them (evaluation).
/// GPipe: every forward, then every backward, microbatches in order.
/// 1F1B: pp - 1 - r forwards to fill the pipeline, then one forward and
/// one backward in turn, then the remaining backwards. Interleaved1F1B
/// (Megatron's order): microbatches in rounds of pp, each round through
/// the rank's stages in turn (backwards through them in reverse), after
/// 2 (pp - 1 - r) + (v - 1) pp forwards to fill, v stages per rank.
std::vector<std::vector<Unit>> rankOrders(Schedule schedule, Shape shape,
                                          bool forwardOnly = false);

/// How long units take: a forward of stage s `forward[s]`, a backward
/// `backward[s]` (when empty: 1 and 2 for every stage). Where given, the
/// first microbatch's units take `firstForward[s]` / `firstBackward[s]`
/// and the last's (microbatch `microbatches` - 1) `lastForward[s]` /
/// `lastBackward[s]` instead: a step's first and last microbatches do
/// more or less than the others (gradients accumulated from the second).
struct Durations {
  std::vector<double> forward, backward;
  std::vector<double> firstForward, firstBackward, lastForward, lastBackward;
  int64_t microbatches = 0;
  double of(const Unit &unit) const;
};

/// When each unit runs: every rank runs its units in order, each as soon
/// as the rank is free and what it reads is there (the previous stage's
/// forward of the microbatch; the next stage's backward and the stage's
/// own forward); a transfer takes no time.
struct Timeline {
  /// start[r][i], finish[r][i]: of rank r's i-th unit.
  std::vector<std::vector<double>> start, finish;
  double makespan = 0;
  /// 1 - (the ranks' busy time) / (ranks x makespan).
  double bubble = 0;
};

/// The timeline of `orders`, or nothing and an error line when some rank
/// would wait forever (a unit whose input is never produced before it).
std::optional<Timeline> simulate(const std::vector<std::vector<Unit>> &orders,
                                 Shape shape, const Durations &durations,
                                 std::string &error);

/// A transfer's MPI-style tag, the same at both ends: the receiving
/// stage, the microbatch and the direction.
int64_t transferTag(Shape shape, int64_t microbatch, int64_t receivingStage,
                    bool gradient);
/// The largest tag a step uses.
int64_t maxTransferTag(Shape shape);

} // namespace kiln::pipeline

#endif // KILN_TRANSFORMS_PIPELINEORDER_H
