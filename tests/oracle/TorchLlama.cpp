//===- TorchLlama.cpp - The LibTorch oracle -------------------------------===//

#include "TorchLlama.h"

#include <torch/torch.h>

#include <cmath>

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

/// x * rsqrt(mean(x^2) + eps) * w, the mean and rsqrt in float64 whatever
/// x's dtype (as Kiln and most fused kernels compute the row statistic).
torch::Tensor rmsNorm(const torch::Tensor &x, const torch::Tensor &w,
                      double eps) {
  torch::Tensor x64 = x.to(torch::kFloat64);
  torch::Tensor r = torch::rsqrt(x64.pow(2).mean(-1, /*keepdim=*/true) + eps);
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

/// Causal grouped-query attention on [B, S, H, D] tensors.
torch::Tensor attention(const torch::Tensor &q, const torch::Tensor &k,
                        const torch::Tensor &v) {
  int64_t seq = q.size(1), d = q.size(3);
  int64_t rep = q.size(2) / k.size(2);
  torch::Tensor qh = q.transpose(1, 2);
  torch::Tensor kh = k.repeat_interleave(rep, 2).transpose(1, 2);
  torch::Tensor vh = v.repeat_interleave(rep, 2).transpose(1, 2);
  torch::Tensor scores = qh.matmul(kh.transpose(-2, -1)) / std::sqrt(double(d));
  torch::Tensor mask = torch::ones({seq, seq}, torch::kBool).triu(1);
  scores = scores.masked_fill(mask, -std::numeric_limits<double>::infinity());
  // Softmax in at least fp32 (Kiln's attention computes in fp32).
  torch::Tensor p = torch::softmax(scores.to(torch::kFloat64), -1).to(q.dtype());
  return p.matmul(vh).transpose(1, 2);
}
} // namespace

LossAndGrads lossAndGrads(const LlamaShape &s, const Tensors &weights,
                          const std::vector<int32_t> &tokens,
                          const std::vector<int32_t> &targets, int64_t batch,
                          int64_t seq, Precision precision) {
  bool bf16 = precision == Precision::Float32RoundedToBf16;
  // R marks a cast point: identity in float64, a round trip through
  // bfloat16 otherwise (whose backward rounds the incoming gradient too).
  auto R = [&](const torch::Tensor &x) {
    return bf16 ? x.to(torch::kBFloat16).to(torch::kFloat32) : x;
  };
  torch::NoGradGuard outer;
  std::map<std::string, torch::Tensor> w;
  int64_t hd = s.dim / s.heads;
  auto shapeOf = [&](const std::string &name) -> std::vector<int64_t> {
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
  };
  for (const auto &[name, values] : weights)
    w[name] = fromVector(values, shapeOf(name))
                  .to(bf16 ? torch::kFloat32 : torch::kFloat64)
                  .requires_grad_(true);
  // A weight as the compute sees it.
  auto W = [&](const std::string &name) { return R(w.at(name)); };

  torch::AutoGradMode grad(true);
  auto tok = torch::tensor(std::vector<int64_t>(tokens.begin(), tokens.end()));
  auto tgt = torch::tensor(std::vector<int64_t>(targets.begin(), targets.end()));
  torch::Tensor h = R(W("model.embed_tokens.weight").index_select(0, tok))
                        .view({batch, seq, s.dim});
  // Operands go through R too: a no-op on values already rounded, but its
  // backward rounds each consumer's gradient before they are summed, as
  // Kiln's backward ops each round their result.
  auto linear = [&](const torch::Tensor &x, const std::string &name) {
    return R(R(x).matmul(W(name).t()));
  };
  auto norm = [&](const torch::Tensor &x, const std::string &name) {
    return R(rmsNorm(R(x), W(name), s.eps));
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
    torch::Tensor o =
        R(attention(R(rope(R(q), s.theta)), R(rope(R(k), s.theta)), R(v)))
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
  torch::Tensor loss =
      torch::nn::functional::cross_entropy(logits.view({-1, s.vocab}), tgt);
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

} // namespace oracle
