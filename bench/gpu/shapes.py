#!/usr/bin/env python3
"""What each benchmark shape is, read from Kiln's plans (bench/gpu/run
--prepare, on the machine with MLIR), so that PyTorch runs the same work.

    shapes.py DIR NAME-SEQ ...

For each NAME-SEQ, DIR holds NAME-SEQ.toml (`kiln config` of the shape, the
effective keys) and the plans NAME-SEQ-{bf16,tensorwise,rowwise}.kplan.
Writes DIR/bench.json: per shape, torch_step.py's arguments (the model's
sizes; the optimizer's hyperparameters as the plan's train_step has them),
the parameter count and the FLOPs per token; and DIR/NAME-SEQ-RECIPE.fp8-linears,
the linears Kiln's FP8 plan runs in FP8, by torch_step.py's module names,
so torchao and the hand-rolled recipe convert the same ones.

FLOPs per token (every row of the table uses the same count):
  6 N, N the parameters that multiply (every parameter but the embedding
  table; a tied embedding is the output projection and counts once; the
  norms' weights are in N too, a rounding error), plus causal attention:
  6 x layers x seq x (heads x head_dim), half of the 12 x ... that a full
  (non-causal) score matrix would give: QK^T and PV are 2 x seq x
  heads*head_dim FLOPs each per token forward, backward twice that, and the
  causal mask halves it.
"""
import json
import re
import sys
import tomllib

ROLES = ("wq", "wk", "wv", "wo", "w1", "w3", "w2")


def read_plan(path):
    with open(path) as f:
        return json.load(f)


def parameters(plan):
    """Name -> shape of the model's parameters (not the AdamW moments)."""
    return {v["name"]: v["shape"] for v in plan["values"]
            if v["kind"] == "state" and not v["name"].startswith("exp_avg")}


def fp8_linears(plan):
    """torch_step.py's names of the linears the plan runs in FP8."""
    names = set()
    for step in plan["entries"]["train_step"]["steps"]:
        if step["op"] != "scaled_matmul":
            continue
        attrs = step["attrs"]
        if attrs["role"] == "output":
            names.add("output")
            continue
        layer = re.search(r"layers\.(\d+)\.", attrs["param"])
        if not layer or attrs["role"] not in ROLES:
            sys.exit(f"error: a scaled_matmul of {attrs['param']} (role "
                     f"{attrs['role']}) has no torch_step.py name")
        names.add(f"layers.{layer.group(1)}.{attrs['role']}")
    return sorted(names, key=lambda n: [int(t) if t.isdigit() else t
                                        for t in re.split(r"(\d+)", n)])


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def describe(folder, shape):
    with open(f"{folder}/{shape}.toml", "rb") as f:
        config = tomllib.load(f)
    m, t = config["model"], config["training"]
    plan = read_plan(f"{folder}/{shape}-bf16.kplan")
    params = parameters(plan)
    steps = plan["entries"]["train_step"]["steps"]
    adamw = next(s["attrs"] for s in steps if s["op"] == "adamw")
    schedule = next(s["attrs"] for s in steps if s["op"] == "lr_schedule")
    heads = m["n_heads"]
    kv = m.get("n_kv_heads", heads)
    head_dim = m["dim"] // heads
    ffn = params["model.layers.0.mlp.gate_proj.weight"][0]
    tied = "lm_head.weight" not in params
    total = sum(numel(s) for s in params.values())
    embedding = numel(params["model.embed_tokens.weight"])
    multiplying = total if tied else total - embedding
    seq = t["seq_len"]
    attention = 6 * m["n_layers"] * seq * heads * head_dim
    torch_args = {
        "dim": m["dim"], "layers": m["n_layers"], "heads": heads,
        "kv-heads": kv, "ffn": ffn, "vocab": m["vocab_size"],
        "batch": t["global_batch_size"], "seq": seq,
        "norm-eps": m["norm_eps"], "rope-theta": m["rope_theta"],
        "lr": schedule["peak"], "betas": [adamw["beta1"], adamw["beta2"]],
        "eps": adamw["eps"], "weight-decay": adamw["weight_decay"],
        "max-norm": adamw["max_norm"],
    }
    fp8 = {}
    for recipe in ("tensorwise", "rowwise"):
        names = fp8_linears(read_plan(f"{folder}/{shape}-{recipe}.kplan"))
        path = f"{folder}/{shape}-{recipe}.fp8-linears"
        with open(path, "w") as f:
            f.writelines(n + "\n" for n in names)
        fp8[recipe] = {"file": f"{shape}-{recipe}.fp8-linears",
                       "count": len(names)}
    return {
        "shape": shape, "tie": tied, "torch_args": torch_args,
        "params": total, "embedding_params": embedding,
        "flop_params": multiplying,
        "flops_per_token": 6 * multiplying + attention,
        "attention_flops_per_token": attention,
        "linears": m["n_layers"] * len(ROLES) + 1, "fp8_linears": fp8,
    }


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: shapes.py DIR NAME-SEQ ...")
    folder = sys.argv[1]
    shapes = [describe(folder, s) for s in sys.argv[2:]]
    with open(f"{folder}/bench.json", "w") as f:
        json.dump({"shapes": shapes}, f, indent=1)
    for s in shapes:
        fp8 = ", ".join(f"{r} {v['count']}" for r, v in s["fp8_linears"].items())
        print(f"{s['shape']}: {s['params'] / 1e9:.3f} B parameters, "
              f"{s['flops_per_token'] / 1e9:.2f} GFLOP per token "
              f"({s['attention_flops_per_token'] / 1e9:.2f} attention); "
              f"FP8 linears of {s['linears']}: {fp8}")


if __name__ == "__main__":
    main()
