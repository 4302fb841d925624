// The device memory check: the consumers of a plan, largest first, and the
// refusal that names them when the device has too little free memory.
#include "kiln/Runtime/MemoryCheck.h"

#include <gtest/gtest.h>

#include <cstdlib>

using namespace kiln::runtime;

namespace {
PlanValue state(const std::string &name, int64_t floats) {
  PlanValue v;
  v.kind = PlanValue::State;
  v.name = name;
  v.shape = {floats};
  v.dtype = DType::F32;
  return v;
}

/// 4 KiB of parameters, 8 KiB of moments, 64 B of history; an arena of
/// 100 KiB whose fullest step holds 60 KiB of activations, 20 KiB of
/// gradients and 4 KiB of gathered copies.
Plan examplePlan() {
  Plan plan;
  plan.values = {state("w", 1024), state("exp_avg.w", 1024),
                 state("exp_avg_sq.w", 1024),
                 state("fp8_amax_history.input.w", 16)};
  plan.arenaBytes = 100 << 10;
  PlanEntry step;
  step.arenaBytes = 100 << 10;
  step.liveAtPeak = {3, 4 << 10, 20 << 10, 60 << 10};
  PlanEntry eval;
  eval.arenaBytes = 10 << 10;
  plan.entries["train_step"] = step;
  plan.entries["eval_loss"] = eval;
  return plan;
}
} // namespace

TEST(MemoryCheck, ListsTheConsumersLargestFirst) {
  std::vector<MemoryConsumer> c = deviceMemoryConsumers(examplePlan(), 0);
  ASSERT_EQ(c.size(), 7u);
  EXPECT_EQ(c[0].what, "activations at the fullest step of train_step");
  EXPECT_EQ(c[0].bytes, 60 << 10);
  EXPECT_EQ(c[1].bytes, 20 << 10); // gradients
  EXPECT_EQ(c[2].what, "rest of the arena (other steps' buffers, alignment)");
  EXPECT_EQ(c[2].bytes, 16 << 10);
  EXPECT_EQ(c[3].what, "AdamW moments (exp_avg, exp_avg_sq)");
  EXPECT_EQ(c[3].bytes, 8 << 10);
  EXPECT_EQ(c[4].bytes, 4 << 10); // parameters and the gathered copies tie
  EXPECT_EQ(c[5].bytes, 4 << 10);
  // The histories are counted apart from the moments.
  EXPECT_EQ(c[6].what, "FP8 amax histories");
  EXPECT_EQ(c[6].bytes, 64);
  EXPECT_EQ(predictedDeviceBytes(examplePlan(), 0),
            (100 << 10) + (12 << 10) + 64);
  EXPECT_EQ(predictedDeviceBytes(examplePlan(), 1000),
            (100 << 10) + (12 << 10) + 64 + 1000);
}

TEST(MemoryCheck, RefusesWithTheLargestConsumersNamed) {
  Plan plan = examplePlan();
  int64_t need = predictedDeviceBytes(plan, 512);
  EXPECT_FALSE(memoryShortfall(plan, 512, need, "GPU 0"));
  std::string why =
      memoryShortfall(plan, 512, need - 1, "GPU 0 (Test)").takeMessage();
  EXPECT_NE(why.find("the plan needs 112.6 KiB of memory per rank but "
                     "112.6 KiB are free on GPU 0 (Test)"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("the largest: activations at the fullest step of "
                     "train_step 60.0 KiB, gradients at the fullest step of "
                     "train_step 20.0 KiB, rest of the arena"),
            std::string::npos)
      << why;
}

// The memory kept free for what a backend allocates after the check
// counts, and the refusal says so.
TEST(MemoryCheck, CountsAndNamesTheReserve) {
  Plan plan = examplePlan();
  int64_t need = predictedDeviceBytes(plan, 512);
  MemoryReserve reserve{1 << 20, "kernel modules"};
  EXPECT_FALSE(memoryShortfall(plan, 512, need + (1 << 20), "GPU 0",
                               kDeviceBackendBuffers, reserve));
  std::string why = memoryShortfall(plan, 512, need + (1 << 20) - 1, "GPU 0",
                                    kDeviceBackendBuffers, reserve)
                        .takeMessage();
  EXPECT_NE(why.find("the plan needs 1.1 MiB of memory per rank"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("; with 1.0 MiB kept free for kernel modules ("),
            std::string::npos)
      << why;
}

// When everything but the state fits, the refusal says how many ranks
// would shard the state small enough: 12 KiB + 64 B of state, 100.5 KiB of
// the rest, 104 KiB free: 3.5 KiB of room, so 4 ranks.
TEST(MemoryCheck, SaysHowManyRanksWouldFit) {
  Plan plan = examplePlan();
  std::string why =
      memoryShortfall(plan, 512, 104 << 10, "GPU 0").takeMessage();
  EXPECT_NE(why.find("sharded over 4 ranks (mpirun -np N, or --world-size N "
                     "to compile for N) the state would fit"),
            std::string::npos)
      << why;
  // Without room for the rest, only the other remedies are named.
  why = memoryShortfall(plan, 512, 50 << 10, "GPU 0").takeMessage();
  EXPECT_EQ(why.find("sharded over"), std::string::npos) << why;
  EXPECT_NE(why.find("activation checkpointing"), std::string::npos) << why;
}

// The host's free memory comes from /proc/meminfo, shared among the ranks
// Open MPI started on the machine.
TEST(MemoryCheck, ReadsTheHostsAvailableMemory) {
  std::string where;
  std::optional<int64_t> all = hostAvailableBytes(where);
  ASSERT_TRUE(all);
  EXPECT_GT(*all, 0);
  EXPECT_EQ(where, "this machine (MemAvailable)");
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
  std::optional<int64_t> quarter = hostAvailableBytes(where);
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  ASSERT_TRUE(quarter);
  EXPECT_NEAR(static_cast<double>(*quarter), *all / 4.0, *all / 10.0);
  EXPECT_EQ(where, "this machine (MemAvailable, shared by 4 ranks)");
}

TEST(MemoryCheck, FormatsBytes) {
  EXPECT_EQ(formatBytes(512), "512 B");
  EXPECT_EQ(formatBytes(3 << 20), "3.0 MiB");
  EXPECT_EQ(formatBytes(int64_t(3) << 31), "6.00 GiB");
}
