//===- TorchLlama.cpp - The LibTorch oracle -------------------------------===//

#include "TorchLlama.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>

namespace oracle {

namespace {
torch::Tensor fromVector(const std::vector<double> &v,
                         std::vector<int64_t> shape) {
  return torch::tensor(v, torch::kFloat64).view(shape).clone();
}

std::vector<double> toVector(const torch::Tensor &t) {
  torch::Tensor c = t.to(torch::kFloat64).contiguous();
  return std::vector<double>(c.data_ptr<double>(),
                             c.data_ptr<double>() + c.numel());
}

/// x * rsqrt(mean(x^2) + eps) * w. With `wideStats` the mean and rsqrt are
/// in float64 whatever x's dtype (as Kiln and most fused kernels compute
/// the row statistic); without, in x's dtype (as eager PyTorch does).
torch::Tensor rmsNorm(const torch::Tensor &x, const torch::Tensor &w,
                      double eps, bool wideStats) {
  torch::Tensor xs = wideStats ? x.to(torch::kFloat64) : x;
  torch::Tensor r = torch::rsqrt(xs.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return x * r.to(x.dtype()) * w;
}

/// HF Llama's rotate-half RoPE on [B, S, H, D].
torch::Tensor rope(const torch::Tensor &x, double theta) {
  int64_t seq = x.size(1), d = x.size(3), half = d / 2;
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  torch::Tensor i = torch::arange(half, opts);
  torch::Tensor freq = torch::pow(theta, -2.0 * i / d);
  torch::Tensor angle = torch::outer(torch::arange(seq, opts), freq);
  torch::Tensor cos = angle.cos().to(x.dtype()).view({1, seq, 1, half});
  torch::Tensor sin = angle.sin().to(x.dtype()).view({1, seq, 1, half});
  torch::Tensor x1 = x.narrow(3, 0, half), x2 = x.narrow(3, half, half);
  return torch::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, 3);
}

/// Causal grouped-query attention on [B, S, H, D] tensors; the softmax in
/// float64 with `wideStats`, in q's dtype without.
torch::Tensor attention(const torch::Tensor &q, const torch::Tensor &k,
                        const torch::Tensor &v, bool wideStats) {
  int64_t seq = q.size(1), d = q.size(3);
  int64_t rep = q.size(2) / k.size(2);
  torch::Tensor qh = q.transpose(1, 2);
  torch::Tensor kh = k.repeat_interleave(rep, 2).transpose(1, 2);
  torch::Tensor vh = v.repeat_interleave(rep, 2).transpose(1, 2);
  torch::Tensor scores = qh.matmul(kh.transpose(-2, -1)) / std::sqrt(double(d));
  torch::Tensor mask = torch::ones({seq, seq}, torch::kBool).triu(1);
  scores = scores.masked_fill(mask, -std::numeric_limits<double>::infinity());
  // Softmax in at least fp32 (Kiln's attention computes in fp32).
  torch::Tensor p =
      wideStats ? torch::softmax(scores.to(torch::kFloat64), -1).to(q.dtype())
                : torch::softmax(scores, -1);
  return p.matmul(vh).transpose(1, 2);
}

/// The shape of the parameter `name` (an HF name).
std::vector<int64_t> parameterShape(const LlamaShape &s,
                                    const std::string &name) {
  int64_t hd = s.dim / s.heads;
  if (name.find("norm") != std::string::npos)
    return {s.dim};
  if (name == "model.embed_tokens.weight" || name == "lm_head.weight")
    return {s.vocab, s.dim};
  if (name.find("k_proj") != std::string::npos ||
      name.find("v_proj") != std::string::npos)
    return {s.kvHeads * hd, s.dim};
  if (name.find("gate_proj") != std::string::npos ||
      name.find("up_proj") != std::string::npos)
    return {s.hidden, s.dim};
  if (name.find("down_proj") != std::string::npos)
    return {s.dim, s.hidden};
  return {s.dim, s.dim};
}

/// `weights` as leaf tensors requiring gradients, float64 in
/// Precision::Float64 and float32 otherwise.
std::map<std::string, torch::Tensor>
parameters(const LlamaShape &s, const Tensors &weights, Precision precision) {
  std::map<std::string, torch::Tensor> w;
  for (const auto &[name, values] : weights)
    w[name] = fromVector(values, parameterShape(s, name))
                  .to(precision == Precision::Float64 ||
                              precision == Precision::Float64RoundedToBf16
                          ? torch::kFloat64
                          : torch::kFloat32)
                  .requires_grad_(true);
  return w;
}

torch::Tensor indices(const std::vector<int32_t> &ids) {
  return torch::tensor(std::vector<int64_t>(ids.begin(), ids.end()));
}

/// The mean next-token cross-entropy of the model with parameters `w` on
/// token ids `tok` and targets `tgt` (int64, batch * seq each), recording
/// the autograd graph.
torch::Tensor forwardLoss(const LlamaShape &s,
                          const std::map<std::string, torch::Tensor> &w,
                          const torch::Tensor &tok, const torch::Tensor &tgt,
                          int64_t batch, int64_t seq, Precision precision) {
  bool bf16 = precision == Precision::Float32RoundedToBf16 ||
              precision == Precision::Float64RoundedToBf16;
  auto computeType = precision == Precision::Float64RoundedToBf16
                         ? torch::kFloat64
                         : torch::kFloat32;
  bool wideStats = precision != Precision::Float32;
  // R marks a cast point: with bf16 a round trip through bfloat16 (whose
  // backward rounds the incoming gradient too), otherwise the identity.
  auto R = [&](const torch::Tensor &x) {
    return bf16 ? x.to(torch::kBFloat16).to(computeType) : x;
  };
  int64_t hd = s.dim / s.heads;
  // A weight as the compute sees it.
  auto W = [&](const std::string &name) { return R(w.at(name)); };

  torch::AutoGradMode grad(true);
  // The lookup gathers from the master weight and rounds the rows: the
  // forward is the gather of the rounded table, and the backward rounds
  // the incoming gradient but not the sum of the rows, as Kiln's
  // embedding_grad reads a bf16 gradient and writes the f32 one.
  torch::Tensor h = R(w.at("model.embed_tokens.weight").index_select(0, tok))
                        .view({batch, seq, s.dim});
  // Operands go through R too: a no-op on values already rounded, but its
  // backward rounds each consumer's gradient before they are summed, as
  // Kiln's backward ops each round their result.
  auto linear = [&](const torch::Tensor &x, const std::string &name) {
    return R(R(x).matmul(W(name).t()));
  };
  auto norm = [&](const torch::Tensor &x, const std::string &name) {
    return R(rmsNorm(R(x), W(name), s.eps, wideStats));
  };
  for (int64_t l = 0; l < s.layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    torch::Tensor n = norm(h, p + "input_layernorm.weight");
    torch::Tensor q = linear(n, p + "self_attn.q_proj.weight")
                          .view({batch, seq, s.heads, hd});
    torch::Tensor k = linear(n, p + "self_attn.k_proj.weight")
                          .view({batch, seq, s.kvHeads, hd});
    torch::Tensor v = linear(n, p + "self_attn.v_proj.weight")
                          .view({batch, seq, s.kvHeads, hd});
    torch::Tensor o = R(attention(R(rope(R(q), s.theta)),
                                  R(rope(R(k), s.theta)), R(v), wideStats))
                          .reshape({batch, seq, s.dim});
    h = R(R(h) + linear(o, p + "self_attn.o_proj.weight"));
    torch::Tensor n2 = norm(h, p + "post_attention_layernorm.weight");
    torch::Tensor gate =
        R(torch::silu(R(linear(n2, p + "mlp.gate_proj.weight"))));
    torch::Tensor up = linear(n2, p + "mlp.up_proj.weight");
    h = R(R(h) + linear(R(R(gate) * R(up)), p + "mlp.down_proj.weight"));
  }
  torch::Tensor logits =
      linear(norm(h, "model.norm.weight"),
             s.tied ? "model.embed_tokens.weight" : "lm_head.weight");
  return torch::nn::functional::cross_entropy(logits.view({-1, s.vocab}), tgt);
}
} // namespace

LossAndGrads lossAndGrads(const LlamaShape &s, const Tensors &weights,
                          const std::vector<int32_t> &tokens,
                          const std::vector<int32_t> &targets, int64_t batch,
                          int64_t seq, Precision precision) {
  torch::NoGradGuard outer;
  std::map<std::string, torch::Tensor> w = parameters(s, weights, precision);
  torch::Tensor loss = forwardLoss(s, w, indices(tokens), indices(targets),
                                   batch, seq, precision);
  loss.backward();

  LossAndGrads out{loss.item<double>(), {}};
  for (auto &[name, t] : w)
    out.grads[name] = toVector(t.grad());
  return out;
}

std::vector<Tensors> adamw(const Tensors &params,
                           const std::vector<Tensors> &grads,
                           const std::vector<double> &lr,
                           const AdamWConfig &c) {
  std::vector<torch::Tensor> tensors;
  std::vector<std::string> names;
  for (const auto &[name, values] : params) {
    names.push_back(name);
    tensors.push_back(torch::tensor(values, torch::kFloat64)
                          .to(torch::kFloat32)
                          .requires_grad_(true));
  }
  torch::optim::AdamW optimizer(
      tensors, torch::optim::AdamWOptions(lr.at(0))
                   .betas({c.beta1, c.beta2})
                   .eps(c.eps)
                   .weight_decay(c.weightDecay));
  std::vector<Tensors> history;
  for (size_t step = 0; step < grads.size(); ++step) {
    for (size_t i = 0; i < names.size(); ++i)
      tensors[i].mutable_grad() =
          torch::tensor(grads[step].at(names[i]), torch::kFloat64)
              .to(torch::kFloat32);
    if (c.maxNorm > 0)
      torch::nn::utils::clip_grad_norm_(tensors, c.maxNorm);
    for (auto &group : optimizer.param_groups())
      static_cast<torch::optim::AdamWOptions &>(group.options()).lr(lr[step]);
    optimizer.step();
    Tensors now;
    for (size_t i = 0; i < names.size(); ++i)
      now[names[i]] = toVector(tensors[i].detach());
    history.push_back(std::move(now));
  }
  return history;
}

struct EagerTrainer::State {
  LlamaShape shape{};
  int64_t batch = 0, seq = 0;
  double maxNorm = 0;
  Precision precision = Precision::Float32;
  std::map<std::string, torch::Tensor> w;
  std::vector<torch::Tensor> params;
  std::unique_ptr<torch::optim::AdamW> optimizer;
};

EagerTrainer::EagerTrainer(const LlamaShape &s, const Tensors &weights,
                           int64_t batch, int64_t seq, const AdamWConfig &c,
                           Precision precision)
    : state(std::make_unique<State>()) {
  state->shape = s;
  state->batch = batch;
  state->seq = seq;
  state->maxNorm = c.maxNorm;
  state->precision = precision;
  state->w = parameters(s, weights, precision);
  for (auto &[name, t] : state->w)
    state->params.push_back(t);
  // The rate is set again before every step.
  state->optimizer = std::make_unique<torch::optim::AdamW>(
      state->params, torch::optim::AdamWOptions(0.0)
                         .betas({c.beta1, c.beta2})
                         .eps(c.eps)
                         .weight_decay(c.weightDecay));
}

EagerTrainer::~EagerTrainer() = default;

double EagerTrainer::step(const std::vector<int32_t> &tokens,
                          const std::vector<int32_t> &targets, double lr) {
  State &st = *state;
  st.optimizer->zero_grad();
  torch::Tensor loss =
      forwardLoss(st.shape, st.w, indices(tokens), indices(targets), st.batch,
                  st.seq, st.precision);
  loss.backward();
  if (st.maxNorm > 0)
    torch::nn::utils::clip_grad_norm_(st.params, st.maxNorm);
  for (auto &group : st.optimizer->param_groups())
    static_cast<torch::optim::AdamWOptions &>(group.options()).lr(lr);
  st.optimizer->step();
  return loss.item<double>();
}

void setTorchThreads(int n) {
  at::set_num_interop_threads(1);
  torch::set_num_threads(n < 1 ? 1 : n);
}

} // namespace oracle
