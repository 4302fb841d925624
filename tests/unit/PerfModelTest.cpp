//===- PerfModelTest.cpp - The cost model's closed forms ------------------===//
//
// docs/perf-model.md's formulas against their values worked by hand, and
// the hardware descriptions as their sources state them.
//
//===----------------------------------------------------------------------===//

#include "kiln/Driver/PerfModel.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

using namespace kiln;
using namespace kiln::perf;

namespace {

Hardware testGpu() {
  Hardware hw;
  hw.bf16Tflops = 1000;
  hw.fp8Tflops = 2000;
  hw.hbmGBs = 2000;
  hw.hbmGiB = 80;
  hw.gpusPerNode = 8;
  hw.nvlinkGBs = 400;
  hw.networkGBs = 50;
  hw.nvlinkLatencyUs = 2;
  hw.networkLatencyUs = 10;
  return hw;
}

Efficiency testProfile() {
  Efficiency eff;
  eff.gemm = {{0, 0.25, 0.2}, {1024, 0.8, 0.6}};
  eff.attention = 0.5;
  eff.memory = 0.5;
  eff.collective = 0.8;
  return eff;
}

TEST(PerfModel, LargeGemmsRunAtTheirClassShareOfThePeak) {
  // 4096^3 x 2 FLOPs at 0.8 of 1000 TFLOP/s; its 96 MiB of bf16 would take
  // 0.1 ms at 1 TB/s, well under the 0.17 ms of compute.
  double flops = 2.0 * 4096.0 * 4096.0 * 4096.0;
  EXPECT_DOUBLE_EQ(gemmSeconds(4096, 4096, 4096, runtime::DType::BF16,
                               3 * 4096 * 4096 * 2, testGpu(), testProfile()),
                   flops / (1000e12 * 0.8));
  // FP8 at its own peak and share; f32 at TF32's (half of bf16's).
  EXPECT_DOUBLE_EQ(gemmSeconds(4096, 4096, 4096, runtime::DType::F8E4M3, 0,
                               testGpu(), testProfile()),
                   flops / (2000e12 * 0.6));
  EXPECT_DOUBLE_EQ(gemmSeconds(4096, 4096, 4096, runtime::DType::F32, 0,
                               testGpu(), testProfile()),
                   flops / (500e12 * 0.8));
}

TEST(PerfModel, SmallGemmsAreMemoryBound) {
  // 16 x 4096 x 4096: 0.54 GFLOP at 0.25 of the peak is 2.1 us; moving the
  // 32 MiB weight at 1 TB/s takes 33.6 us: the roofline's memory side.
  int64_t bytes = 4096 * 4096 * 2 + 2 * 16 * 4096 * 2;
  EXPECT_DOUBLE_EQ(gemmSeconds(16, 4096, 4096, runtime::DType::BF16, bytes,
                               testGpu(), testProfile()),
                   double(bytes) / (2000e9 * 0.5));
}

TEST(PerfModel, AttentionFlopsAreFourBHSSD) {
  EXPECT_DOUBLE_EQ(attentionFlops(2, 32, 8192, 128, false, false),
                   4.0 * 2 * 32 * 8192.0 * 8192.0 * 128);
  EXPECT_DOUBLE_EQ(attentionFlops(2, 32, 8192, 128, true, false),
                   2.0 * 2 * 32 * 8192.0 * 8192.0 * 128);
  EXPECT_DOUBLE_EQ(attentionFlops(2, 32, 8192, 128, true, true),
                   2.5 * 2.0 * 2 * 32 * 8192.0 * 8192.0 * 128);
}

TEST(PerfModel, AnAxisUsesNvlinkWhenItsGroupFitsANode) {
  Hardware hw = testGpu();
  EXPECT_EQ(axisLink(8, 1, hw).gbs, 400); // tp 8
  EXPECT_EQ(axisLink(8, 1, hw).nodes, 1);
  EXPECT_EQ(axisLink(4, 2, hw).gbs, 400); // dp_shard 4 over tp 2: 8 GPUs
  EXPECT_EQ(axisLink(2, 8, hw).gbs, 50);  // dp_shard 2 over tp 8: 2 nodes
  EXPECT_EQ(axisLink(2, 8, hw).nodes, 2);
  EXPECT_EQ(axisLink(32, 1, hw).nodes, 4); // dp_shard 32 over tp 1
  EXPECT_EQ(axisLink(4, 64, hw).nodes, 4); // pp 4 over 64 ranks a stage
}

TEST(PerfModel, CollectivesFollowNcclsRingAndTree) {
  Efficiency eff = testProfile();
  // 100 GB/s; a step 5 us inside a node, 20 us across nodes.
  Link one{100, 5, 20, 1}, four{100, 5, 20, 4};
  double beta = 1.0 / (100e9 * 0.8), s = 1 << 30, us = 1e-6;
  // Ring all-gather over 8 in a node: 7 steps, 7/8 of the buffer.
  EXPECT_DOUBLE_EQ(
      collectiveSeconds(Collective::AllGather, 1 << 30, 8, one, eff),
      7 * 5 * us + 7.0 / 8 * s * beta);
  // Over 32 ranks on 4 nodes: 3 of the 31 steps cross nodes.
  EXPECT_DOUBLE_EQ(
      collectiveSeconds(Collective::ReduceScatter, 1 << 30, 32, four, eff),
      (28 * 5 + 3 * 20) * us + 31.0 / 32 * s * beta);
  // All-reduce: twice the bytes; the tree's 2 log2(n) steps beat the
  // ring's 2 (n - 1): in a node 6 steps of 5 us.
  EXPECT_DOUBLE_EQ(
      collectiveSeconds(Collective::AllReduce, 1 << 30, 8, one, eff),
      6 * 5 * us + 2 * 7.0 / 8 * s * beta);
  // 64 ranks on 4 nodes: 12 tree steps, 4 of them (2 log2 4) across.
  EXPECT_DOUBLE_EQ(collectiveSeconds(Collective::AllReduce, 4, 64, four, eff),
                   (8 * 5 + 4 * 20) * us + 2 * 63.0 / 64 * 4 * beta);
  EXPECT_DOUBLE_EQ(collectiveSeconds(Collective::SendRecv, 1000, 2, four, eff),
                   20 * us + 1000 * beta);
  EXPECT_EQ(collectiveSeconds(Collective::AllGather, 1 << 30, 1, one, eff), 0);
}

TEST(PerfModel, EagerOpsMoveWhatTheProfileSays) {
  Efficiency eff = testProfile();
  eff.eagerBytesPerElement = {{"rms_norm", 36}, {"rope", 20}};
  // 1024 x 4096 elements at 36 bytes each, against the fused kernel's 4.
  EXPECT_EQ(eagerOpBytes("rms_norm", 1024 * 4096, 4 * 1024 * 4096, eff),
            36 * 1024 * 4096);
  // An op the table does not list, and one whose kernel already moves
  // more, keep the plan's bytes.
  EXPECT_EQ(eagerOpBytes("silu", 1024, 4096, eff), 4096);
  EXPECT_EQ(eagerOpBytes("rope", 10, 500, eff), 500);
}

TEST(PerfModel, EagerLossHoldsWhatTheProfileSays) {
  Efficiency eff = testProfile();
  eff.eagerHeldPerElement = {{"cross_entropy_grad", 12}};
  // 1000 logits: 12 bytes each held, against the plan's bf16 logits and
  // gradient (4 bytes a logit).
  EXPECT_EQ(eagerHeldExtraBytes("cross_entropy_grad", 1000, 4000, eff), 8000);
  // An op the table does not list holds nothing more; nor does one whose
  // plan already holds more.
  EXPECT_EQ(eagerHeldExtraBytes("rms_norm_grad", 1000, 4000, eff), 0);
  EXPECT_EQ(eagerHeldExtraBytes("cross_entropy_grad", 10, 500, eff), 0);
  for (const char *op : {"cross_entropy", "cross_entropy_grad",
                         "vocab_parallel_max", "vocab_parallel_stats_grad"})
    EXPECT_TRUE(isLossOp(op)) << op;
  for (const char *op : {"rms_norm", "linear", ""})
    EXPECT_FALSE(isLossOp(op)) << op;
}

TEST(PerfModel, TheTorchTitanProfileCountsEagerPyTorch) {
  runtime::Expected<Efficiency> eff = loadEfficiency("torchtitan-h100-2024");
  ASSERT_TRUE(eff) << eff.error().message();
  // docs/perf-model.md, "Eager PyTorch": counted from TorchTitan's code.
  std::map<std::string, double> counted = {{"rms_norm", 36},
                                           {"rms_norm_grad", 92},
                                           {"rope", 20},
                                           {"rope_grad", 20},
                                           {"cross_entropy", 14},
                                           {"cross_entropy_grad", 22},
                                           {"vocab_parallel_stats", 12},
                                           {"vocab_parallel_stats_grad", 22}};
  EXPECT_EQ(eff->eagerBytesPerElement, counted);
  std::map<std::string, double> held = {{"cross_entropy_grad", 12},
                                        {"vocab_parallel_stats_grad", 12}};
  EXPECT_EQ(eff->eagerHeldPerElement, held);
}

TEST(PerfModel, BuiltInHardwareIsItsDatasheet) {
  runtime::Expected<Hardware> h100 = loadHardware("h100-sxm");
  ASSERT_TRUE(h100) << h100.error().message();
  EXPECT_EQ(h100->bf16Tflops, 989.4);
  EXPECT_EQ(h100->fp8Tflops, 1978.9);
  EXPECT_EQ(h100->hbmGBs, 3350);
  EXPECT_EQ(h100->gpusPerNode, 8);
  runtime::Expected<Hardware> h200 = loadHardware("h200");
  ASSERT_TRUE(h200) << h200.error().message();
  EXPECT_EQ(h200->hbmGBs, 4800);
  runtime::Expected<Hardware> titan = loadHardware("h100-hbm2e-500w");
  ASSERT_TRUE(titan) << titan.error().message();
  EXPECT_EQ(titan->hbmGBs, 2400);
  EXPECT_EQ(titan->hbmGiB, 96);
  EXPECT_EQ(titan->networkGBs, 50); // 400 Gb/s
}

TEST(PerfModel, BadDescriptionsAreOneLine) {
  runtime::Expected<Hardware> unknown = loadHardware("b200");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().message(), "unknown hardware description 'b200' "
                                       "(built in: h100-hbm2e-500w, h100-sxm, "
                                       "h200; or a path to a .toml file)");
  std::string path = ::testing::TempDir() + "/bad-gpu.toml";
  std::ofstream(path) << "name = \"x\"\nsource = \"y\"\n[gpu]\n"
                         "bf16_tflops = -1\n";
  runtime::Expected<Hardware> bad = loadHardware(path);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message(),
            path + ": 'gpu.bf16_tflops' is -1, outside (0, 1e+06]");
  std::ofstream(path) << "name = \"x\n";
  runtime::Expected<Hardware> syntax = loadHardware(path);
  ASSERT_FALSE(syntax);
  EXPECT_EQ(syntax.error().message().rfind(path + ":1:", 0), 0u)
      << syntax.error().message();
  std::remove(path.c_str());
}

} // namespace
