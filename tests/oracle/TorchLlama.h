//===- TorchLlama.h - The LibTorch oracle, behind a torch-free API -*- C++ -*-===//
//
// The same Llama as Kiln's frontend builds, written independently with
// torch ops in float64, and torch::optim::AdamW with clip_grad_norm_. Only
// TorchLlama.cpp includes torch: the rest of the tests, and the benchmark
// in bench/ that times this model as the LibTorch eager baseline, stay
// quick to compile.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TESTS_ORACLE_TORCHLLAMA_H
#define KILN_TESTS_ORACLE_TORCHLLAMA_H

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace oracle {

struct LlamaShape {
  int64_t dim, layers, heads, kvHeads, vocab, hidden;
  double eps, theta;
  bool tied;
};

using Tensors = std::map<std::string, std::vector<double>>;

struct LossAndGrads {
  double loss;
  Tensors grads; // by HF parameter name
};

/// How the reference computes.
enum class Precision {
  /// Everything in float64.
  Float64,
  /// float32, with every weight rounded to bfloat16 where it is used and
  /// every op's result rounded to bfloat16 (the round trip through bf16
  /// also rounds the gradient flowing back through that point): the cast
  /// points of Kiln's default mixed-precision policy. The embedding's
  /// gradient is the exception: its rows are summed and left unrounded
  /// (the lookup rounds the gathered rows, not the table).
  Float32RoundedToBf16,
  /// The same cast points, with float64 arithmetic between them: how far
  /// two correct fp32 implementations of the policy can be from each
  /// other (a last-bit difference before a rounding moves it by one bf16
  /// ulp).
  Float64RoundedToBf16,
  /// Plain float32, row statistics and softmax included: what an eager
  /// fp32 PyTorch Llama computes. The benchmark's baseline; the oracle
  /// tests use the two modes above.
  Float32,
};

/// Loss and gradients of the mean next-token cross-entropy.
LossAndGrads lossAndGrads(const LlamaShape &shape, const Tensors &weights,
                          const std::vector<int32_t> &tokens,
                          const std::vector<int32_t> &targets, int64_t batch,
                          int64_t seq, Precision precision);

struct AdamWConfig {
  double beta1, beta2, eps, weightDecay, maxNorm;
};

/// `steps` AdamW updates with torch::optim::AdamW (float32, as Kiln's master
/// weights), each after clipping `grads[step]` to `maxNorm` with
/// torch::nn::utils::clip_grad_norm_; lr[step] is that step's rate. Returns
/// the parameters after each step.
std::vector<Tensors> adamw(const Tensors &params,
                           const std::vector<Tensors> &grads,
                           const std::vector<double> &lr,
                           const AdamWConfig &config);

/// The eager training loop of a PyTorch user, one step per call: zero_grad,
/// forward, backward, clip_grad_norm_ to config.maxNorm, torch::optim::AdamW
/// step. Parameters are float64 in Precision::Float64 and float32
/// otherwise. A step at a time, not a loop over all steps, so that a
/// benchmark can interleave these steps with Kiln's and let background load
/// on the machine fall on both alike.
class EagerTrainer {
public:
  /// Builds the parameters from `weights` (HF names) and the optimizer.
  EagerTrainer(const LlamaShape &shape, const Tensors &weights, int64_t batch,
               int64_t seq, const AdamWConfig &config, Precision precision);
  ~EagerTrainer();
  EagerTrainer(const EagerTrainer &) = delete;
  EagerTrainer &operator=(const EagerTrainer &) = delete;

  /// One training step on `tokens` and `targets` ([batch, seq] each) at
  /// learning rate `lr`; returns the loss before the update.
  double step(const std::vector<int32_t> &tokens,
              const std::vector<int32_t> &targets, double lr);

private:
  struct State; // the torch side: parameters, optimizer
  std::unique_ptr<State> state;
};

/// Sets torch's intra-op thread count to `n` and its inter-op pool to one
/// thread. Call it once, before any other function here: torch refuses to
/// resize the inter-op pool after it has started.
void setTorchThreads(int n);

} // namespace oracle

#endif // KILN_TESTS_ORACLE_TORCHLLAMA_H
