#!/usr/bin/env python3
"""PyTorch baselines for bench/gpu: one Llama-3 training step, the same
shapes and batch as Kiln's plans, timed on the GPU.

    torch_step.py --dim 2048 --layers 16 --heads 32 --kv-heads 8 --ffn 8192
                  --vocab 128256 --batch 1 --seq 2048 --mode compile-fp8

Modes: eager (bf16 autocast), compile (torch.compile, bf16), compile-fp8
(torch.compile with every linear but the output projection in FP8
tensorwise through torch._scaled_mm, torchao's recipe: e4m3 inputs and
weights, e5m2 output gradients, fast accumulation in the forward GEMM only).
Prints one JSON line: tokens/s (median step after warm-up), peak memory.
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


def rope(x, cos, sin):
    a, b = x[..., ::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)


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
        self.n1 = nn.RMSNorm(a.dim, eps=1e-5)
        self.n2 = nn.RMSNorm(a.dim, eps=1e-5)

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
        self.norm = nn.RMSNorm(a.dim, eps=1e-5)
        self.output = nn.Linear(a.dim, a.vocab, bias=False)  # stays bf16
        hd = a.dim // a.heads
        freqs = 1.0 / (500000.0 ** (torch.arange(0, hd, 2).float() / hd))
        angles = torch.outer(torch.arange(a.seq).float(), freqs)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, tokens, targets):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin)
        logits = self.output(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def main():
    p = argparse.ArgumentParser()
    for name in ("dim", "layers", "heads", "kv-heads", "ffn", "vocab",
                 "batch", "seq"):
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--tie", action="store_true",
                   help="the output projection shares the embedding")
    p.add_argument("--mode", choices=("eager", "compile", "compile-fp8"),
                   required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    a = p.parse_args()
    torch.manual_seed(0)
    model = Model(a).cuda()
    if a.tie:
        model.output.weight = model.embed.weight
    if a.mode == "compile-fp8":
        for m in model.modules():
            if isinstance(m, Linear):
                m.fp8 = True
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)

    def step(tokens, targets):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(tokens, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    if a.mode != "eager":
        step = torch.compile(step)
    tokens = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")
    targets = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")
    compile_start = time.perf_counter()
    step(tokens, targets)
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - compile_start
    times = []
    for i in range(a.warmup + a.steps):
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        step(tokens, targets)
        end.record()
        end.synchronize()
        if i >= a.warmup:
            times.append(start.elapsed_time(end) / 1e3)
    seconds = statistics.median(times)
    print(json.dumps({
        "mode": a.mode, "step_s": seconds,
        "tokens_per_s": a.batch * a.seq / seconds,
        "peak_bytes": torch.cuda.max_memory_allocated(),
        "params": sum(p.numel() for p in model.parameters()),
        "embedding_params": model.embed.weight.numel(),
        "first_step_s": compile_s}))


if __name__ == "__main__":
    main()
