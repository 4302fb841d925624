#!/usr/bin/env python3
"""PyTorch baselines for bench/gpu: one Llama-3 training step, the same
shapes, batch and optimizer as Kiln's plans, timed on the GPU.

    torch_step.py --dim 2048 --layers 16 --heads 32 --kv-heads 8 --ffn 8192
                  --vocab 128256 --tie --batch 1 --seq 2048 --mode compile
                  [--fp8-linears FILE] [--lr 8e-4 ...]

A step is what Kiln's train_step does: forward and loss under BF16 autocast
(FP32 master weights and gradients, BF16 compute and residual stream, as
Kiln's default mixed-precision policy), backward, clip_grad_norm_ to
--max-norm, fused AdamW (torch.optim.AdamW(fused=True); weight decay on
every parameter, as kiln-optimizer), zero_grad. The defaults of the
optimizer flags are Kiln's (docs/config.md); bench/gpu/run passes the
values it read from each plan. The learning rate is constant here (Kiln's
follows its warm-up schedule; the work is the same).

Modes:
  eager               no compilation
  compile             torch.compile(model), default mode
  compile-graphs      torch.compile(model, mode="reduce-overhead"): forward
                      and backward replayed as CUDA graphs (CUDA graph
                      trees); torch.compiler.cudagraph_mark_step_begin()
                      before each step. Clipping and the fused AdamW step
                      run eagerly after the graphs, in every mode.
  torchao-tensorwise  torch.compile(model) after torchao's
  torchao-rowwise     convert_to_float8_training with
                      Float8LinearConfig.from_recipe_name(RECIPE); only the
                      linears named in --fp8-linears are converted (the
                      output projection stays BF16)
  compile-scaled-mm   torch.compile(model) with the linears of --fp8-linears
                      through a hand-rolled torch._scaled_mm tensorwise
                      recipe (e4m3 inputs and weights, e5m2 output gradients,
                      fast accumulation in the forward GEMM only)

--fp8-linears FILE names the linears to run in FP8, one module name a line
(layers.0.wq, ..., layers.N.w2; bench/gpu/shapes.py writes the ones Kiln's
plan runs in FP8); without it every linear of the blocks is FP8.

Prints one JSON line: tokens/s (median step after warm-up; a step is timed
on the host clock up to torch.cuda.synchronize(), as kiln-run times a step
up to its loss), peak memory (torch.cuda.max_memory_allocated), the
parameter count, the first step's time (compilation included).

--device cpu runs the same code on the CPU (FP8 emulated by torchao, no
CUDA graphs): a check that this script runs, not a measurement.
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2
MODES = ("eager", "compile", "compile-graphs", "torchao-tensorwise",
         "torchao-rowwise", "compile-scaled-mm")


def to_fp8(x, dtype):
    """Tensorwise cast: codes and the scale they were multiplied by."""
    amax = x.abs().max().float().clamp(min=1e-12)
    scale = torch.finfo(dtype).max / amax
    return (x.float() * scale).clamp(-torch.finfo(dtype).max,
                                     torch.finfo(dtype).max).to(dtype), scale


def column_major(t):
    return t.t().contiguous().t()


class Fp8Matmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        x2 = x.reshape(-1, x.shape[-1])
        xq, sx = to_fp8(x2, E4M3)
        wq, sw = to_fp8(w, E4M3)
        ctx.save_for_backward(xq, sx, wq, sw)
        ctx.shape = x.shape
        y = torch._scaled_mm(xq, wq.t(), scale_a=sx.reciprocal(),
                             scale_b=sw.reciprocal(), out_dtype=torch.bfloat16,
                             use_fast_accum=True)
        return y.reshape(*x.shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, gy):
        xq, sx, wq, sw = ctx.saved_tensors
        g2 = gy.reshape(-1, gy.shape[-1])
        gq, sg = to_fp8(g2, E5M2)
        gx = torch._scaled_mm(gq, column_major(wq), scale_a=sg.reciprocal(),
                              scale_b=sw.reciprocal(), out_dtype=torch.bfloat16)
        gw = torch._scaled_mm(gq.t().contiguous(), column_major(xq),
                              scale_a=sg.reciprocal(), scale_b=sx.reciprocal(),
                              out_dtype=torch.bfloat16)
        return gx.reshape(ctx.shape), gw.to(torch.float32)


class Linear(nn.Linear):
    fp8 = False

    def forward(self, x):
        if self.fp8:
            return Fp8Matmul.apply(x.to(torch.bfloat16), self.weight)
        return super().forward(x)


class RMSNorm(nn.RMSNorm):
    """The weight cast to the input's dtype, as Kiln's plan does: with a
    BF16 input and an FP32 weight torch.rms_norm leaves its fused kernel."""

    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight.to(x.dtype),
                          self.eps)


def rope(x, cos, sin):
    a, b = x[..., ::2].float(), x[..., 1::2].float()
    return torch.stack((a * cos - b * sin, a * sin + b * cos),
                       -1).flatten(-2).type_as(x)


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        hd = a.dim // a.heads
        self.heads, self.kv, self.hd = a.heads, a.kv_heads, hd
        self.wq = Linear(a.dim, a.heads * hd, bias=False)
        self.wk = Linear(a.dim, a.kv_heads * hd, bias=False)
        self.wv = Linear(a.dim, a.kv_heads * hd, bias=False)
        self.wo = Linear(a.heads * hd, a.dim, bias=False)
        self.w1 = Linear(a.dim, a.ffn, bias=False)
        self.w3 = Linear(a.dim, a.ffn, bias=False)
        self.w2 = Linear(a.ffn, a.dim, bias=False)
        self.n1 = RMSNorm(a.dim, eps=a.norm_eps)
        self.n2 = RMSNorm(a.dim, eps=a.norm_eps)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        h = self.n1(x)
        q = self.wq(h).view(b, s, self.heads, self.hd).transpose(1, 2)
        k = self.wk(h).view(b, s, self.kv, self.hd).transpose(1, 2)
        v = self.wv(h).view(b, s, self.kv, self.hd).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           enable_gqa=True)
        x = x + self.wo(o.transpose(1, 2).reshape(b, s, -1))
        h = self.n2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed = nn.Embedding(a.vocab, a.dim)
        self.layers = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.norm = RMSNorm(a.dim, eps=a.norm_eps)
        self.output = nn.Linear(a.dim, a.vocab, bias=False)  # stays bf16
        hd = a.dim // a.heads
        freqs = 1.0 / (a.rope_theta ** (torch.arange(0, hd, 2).float() / hd))
        angles = torch.outer(torch.arange(a.seq).float(), freqs)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, tokens, targets):
        # The residual stream in BF16, as in Kiln's plan (autocast alone
        # would keep it in the embedding's FP32).
        x = self.embed(tokens).to(torch.bfloat16)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin)
        logits = self.output(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def fp8_names(a, model):
    if a.fp8_linears:
        with open(a.fp8_linears) as f:
            names = {line.strip() for line in f if line.strip()}
    else:
        names = {f"layers.{i}.{w}" for i in range(a.layers)
                 for w in ("wq", "wk", "wv", "wo", "w1", "w3", "w2")}
    linears = {n for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    unknown = sorted(names - linears)
    if unknown:
        raise SystemExit(f"error: --fp8-linears names no linear of the model: "
                         f"{', '.join(unknown[:3])}")
    return names


def main():
    p = argparse.ArgumentParser()
    for name in ("dim", "layers", "heads", "kv-heads", "ffn", "vocab",
                 "batch", "seq"):
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--tie", action="store_true",
                   help="the output projection shares the embedding")
    p.add_argument("--norm-eps", type=float, default=1e-5)
    p.add_argument("--rope-theta", type=float, default=500000.0)
    p.add_argument("--mode", choices=MODES, required=True)
    p.add_argument("--fp8-linears", metavar="FILE")
    # Kiln's defaults (docs/config.md, [optimizer]).
    p.add_argument("--lr", type=float, default=8e-4)
    p.add_argument("--betas", type=float, nargs=2, default=(0.9, 0.95))
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--max-norm", type=float, default=1.0)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    a = p.parse_args()
    dev = a.device
    if a.mode == "compile-graphs" and dev != "cuda":
        raise SystemExit("error: compile-graphs needs --device cuda")
    torch.manual_seed(0)
    model = Model(a).to(dev)
    if a.tie:
        model.output.weight = model.embed.weight
    if a.mode.startswith("torchao-"):
        import dataclasses

        import torchao
        from torchao.float8 import (Float8LinearConfig,
                                    convert_to_float8_training)
        config = Float8LinearConfig.from_recipe_name(a.mode.split("-", 1)[1])
        if dev == "cpu":
            config = dataclasses.replace(config, emulate=True)
        names = fp8_names(a, model)
        convert_to_float8_training(model, config=config,
                                   module_filter_fn=lambda m, fqn: fqn in names)
        print(f"torchao {torchao.__version__}: {len(names)} linears in FP8",
              flush=True)
    elif a.mode == "compile-scaled-mm":
        names = fp8_names(a, model)
        for n, m in model.named_modules():
            if isinstance(m, Linear) and n in names:
                m.fp8 = True
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=a.lr, betas=tuple(a.betas), eps=a.eps,
                            weight_decay=a.weight_decay, fused=True)
    forward = model
    if a.mode == "compile-graphs":
        forward = torch.compile(model, mode="reduce-overhead")
    elif a.mode != "eager":
        forward = torch.compile(model)

    def step(tokens, targets):
        if a.mode == "compile-graphs":
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(dev, dtype=torch.bfloat16):
            loss = forward(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, a.max_norm, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    def sync():
        if dev == "cuda":
            torch.cuda.synchronize()

    tokens = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    targets = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    compile_start = time.perf_counter()
    loss = step(tokens, targets).item()
    compile_s = time.perf_counter() - compile_start
    times = []
    for i in range(a.warmup + a.steps):
        start = time.perf_counter()
        step(tokens, targets)
        sync()
        if i >= a.warmup:
            times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    print(json.dumps({
        "mode": a.mode, "step_s": seconds,
        "tokens_per_s": a.batch * a.seq / seconds,
        "peak_bytes": torch.cuda.max_memory_allocated() if dev == "cuda" else 0,
        "params": sum(p.numel() for p in params),
        "embedding_params": model.embed.weight.numel(),
        "first_loss": loss,
        "first_step_s": compile_s}))


if __name__ == "__main__":
    main()
