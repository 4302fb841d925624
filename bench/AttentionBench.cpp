//===- AttentionBench.cpp - CPU attention forward and backward ------------===//
//
// kiln-bench-attention: times kiln::runtime::cpu::attention and
// attentionBackward on the shapes that matter (llama3-debug's, and a longer
// sequence with wider heads), at 1 and 2 threads (setCpuThreads). Each
// entry is the median and minimum of the timed calls after warm-up calls;
// the inputs are fixed pseudo-random numbers in [-1.5, 1.5). GFLOP/s counts
// 4 * dim flops per visible (query, key) pair in the forward (q.k and p v)
// and 10 * dim in the backward (q.k, dout.v, ds k, ds q and p dout, as
// multiply-adds), whether or not a kernel forms masked scores. A checksum of
// the outputs is printed so that two builds can be seen to compute the
// same thing.
//
//   kiln-bench-attention [--runs N] [--warmup N] [--threads N]... [--only S]
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Cpu/Attention.h"
#include "kiln/Runtime/Cpu/Common.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

using namespace kiln::runtime::cpu;

namespace {

struct BenchCase {
  const char *name;
  AttentionShape shape;
  bool causal;
};

struct Timing {
  double median = 0, min = 0;
};

template <typename F> Timing timeRuns(int warmup, int runs, const F &f) {
  for (int i = 0; i < warmup; ++i)
    f();
  std::vector<double> ms(runs);
  for (int i = 0; i < runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    auto t1 = std::chrono::steady_clock::now();
    ms[i] = std::chrono::duration<double, std::milli>(t1 - t0).count();
  }
  std::sort(ms.begin(), ms.end());
  return {ms[runs / 2], ms[0]};
}

std::vector<float> randomFloats(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.5f, 1.5f);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gen);
  return v;
}

double checksum(const std::vector<float> &v) {
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i)
    s += double(v[i]) * double(1 + i % 7);
  return s;
}

void usage(const char *argv0) {
  std::fprintf(stderr,
               "usage: %s [--runs N] [--warmup N] [--threads N]... [--only S]\n"
               "  --runs     timed calls per entry (default 20)\n"
               "  --warmup   untimed calls first (default 3)\n"
               "  --threads  a thread count to time (repeatable; default 1 "
               "and 2)\n"
               "  --only     only the cases whose name contains S\n",
               argv0);
}

} // namespace

int main(int argc, char **argv) {
  int runs = 20, warmup = 3;
  std::vector<int> threadCounts;
  const char *only = nullptr;
  for (int i = 1; i < argc; ++i) {
    auto value = [&]() -> int {
      if (i + 1 >= argc) {
        usage(argv[0]);
        std::exit(2);
      }
      return std::atoi(argv[++i]);
    };
    if (!std::strcmp(argv[i], "--runs"))
      runs = std::max(1, value());
    else if (!std::strcmp(argv[i], "--warmup"))
      warmup = std::max(0, value());
    else if (!std::strcmp(argv[i], "--threads"))
      threadCounts.push_back(std::max(1, value()));
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else {
      usage(argv[0]);
      return 2;
    }
  }
  if (threadCounts.empty())
    threadCounts = {1, 2};

  const BenchCase cases[] = {
      {"llama3-debug causal", {8, 128, 8, 4, 32}, true},
      {"llama3-debug non-causal", {8, 128, 8, 4, 32}, false},
      {"seq 512 dim 64 causal", {8, 512, 8, 4, 64}, true},
  };

  std::printf("%d timed calls after %d warm-up; times in ms (median / min)\n\n",
              runs, warmup);
  std::printf("%-24s %-22s %3s %16s %8s %16s %8s %14s\n", "case",
              "b x s x hq/hkv x d", "thr", "forward", "GFLOP/s", "backward",
              "GFLOP/s", "checksum");
  for (const BenchCase &c : cases) {
    if (only && !std::strstr(c.name, only))
      continue;
    const AttentionShape &s = c.shape;
    const int64_t qSize = s.batch * s.seq * s.qHeads * s.headDim;
    const int64_t kvSize = s.batch * s.seq * s.kvHeads * s.headDim;
    std::vector<float> q = randomFloats(qSize, 1), k = randomFloats(kvSize, 2),
                       v = randomFloats(kvSize, 3),
                       dout = randomFloats(qSize, 4);
    std::vector<float> out(qSize), lse(s.batch * s.qHeads * s.seq), dq(qSize),
        dk(kvSize), dv(kvSize);
    const float scale = 1.0f / std::sqrt(float(s.headDim));
    const double pairs = double(s.batch * s.qHeads) *
                         (c.causal ? double(s.seq) * double(s.seq + 1) / 2
                                   : double(s.seq) * double(s.seq));
    const double fwdFlops = pairs * 4 * double(s.headDim);
    const double bwdFlops = pairs * 10 * double(s.headDim);

    for (int threads : threadCounts) {
      setCpuThreads(threads);
      Timing fwd = timeRuns(warmup, runs, [&] {
        attention(q.data(), k.data(), v.data(), out.data(), lse.data(), s,
                  scale, c.causal);
      });
      Timing bwd = timeRuns(warmup, runs, [&] {
        attentionBackward(q.data(), k.data(), v.data(), out.data(), lse.data(),
                          dout.data(), dq.data(), dk.data(), dv.data(), s,
                          scale, c.causal);
      });
      char shape[64];
      std::snprintf(shape, sizeof shape, "%lldx%lldx%lld/%lldx%lld",
                    (long long)s.batch, (long long)s.seq, (long long)s.qHeads,
                    (long long)s.kvHeads, (long long)s.headDim);
      char f[32], b[32];
      std::snprintf(f, sizeof f, "%.2f / %.2f", fwd.median, fwd.min);
      std::snprintf(b, sizeof b, "%.2f / %.2f", bwd.median, bwd.min);
      double sum = checksum(out) + checksum(lse) + checksum(dq) + checksum(dk) +
                   checksum(dv);
      std::printf("%-24s %-22s %3d %16s %8.1f %16s %8.1f %14.6e\n", c.name,
                  shape, threads, f, fwdFlops / fwd.median * 1e-6, b,
                  bwdFlops / bwd.median * 1e-6, sum);
      std::fflush(stdout);
    }
  }
  return 0;
}
