#!/usr/bin/env python3
"""The GPU half of bench/gpu/run (--plans DIR): runs every row, prints the
table, Kiln's per-category breakdown, its compile times and the GEMM bench.

    measure.py --root ROOT --build BUILD --plans DIR --torchao PATH
               [--only REGEX] [--dry-run]

Rows, per shape of DIR/bench.json (bench/gpu/shapes.py):
  torch eager, torch.compile, torch.compile reduce-overhead (CUDA graphs),
  torch.compile + torchao float8 tensorwise / rowwise, torch.compile +
  hand-rolled _scaled_mm tensorwise (bench/gpu/torch_step.py), and Kiln
  bf16 / tensorwise / rowwise (kiln-run with CUDA graphs; a traced eager run
  of each for the breakdown). Each row is labelled "SHAPE RUN", e.g.
  "1b-2048 torch-compile", "8b-stack-8192 kiln-rowwise"; --only keeps the
  rows whose label the regular expression matches (re.search), and
  "gemm-bench" for kiln-gemm-bench. --dry-run prints the commands instead
  of running them. Every row's result is also appended to
  DIR/results.jsonl.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time

BF16_PEAK = 989e12   # H100 SXM (and H200) dense BF16, FLOP/s
FP8_PEAK = 1979e12   # H100 SXM (and H200) dense FP8
TORCH_RUNS = [  # label, torch_step.py --mode, FP8 recipe of --fp8-linears
    ("torch-eager", "eager", None),
    ("torch-compile", "compile", None),
    ("torch-compile-graphs", "compile-graphs", None),
    ("torchao-tensorwise", "torchao-tensorwise", "tensorwise"),
    ("torchao-rowwise", "torchao-rowwise", "rowwise"),
    ("torch-scaled-mm-tensorwise", "compile-scaled-mm", "tensorwise"),
]
KILN_RUNS = ["bf16", "tensorwise", "rowwise"]
DESCRIPTIONS = {
    "torch-eager": "PyTorch eager, BF16 autocast",
    "torch-compile": "torch.compile, default mode",
    "torch-compile-graphs": 'torch.compile(mode="reduce-overhead"), CUDA graphs',
    "torchao-tensorwise": "torch.compile + torchao float8 tensorwise",
    "torchao-rowwise": "torch.compile + torchao float8 rowwise",
    "torch-scaled-mm-tensorwise": "torch.compile + hand-rolled _scaled_mm tensorwise",
    "kiln-bf16": "Kiln BF16, CUDA graphs",
    "kiln-tensorwise": "Kiln FP8 tensorwise, CUDA graphs",
    "kiln-rowwise": "Kiln FP8 rowwise, CUDA graphs",
}
TORCH_TIMEOUT_S = 1800
KILN_STEPS, KILN_TRACED_STEPS = 25, 4


class Runner:
    def __init__(self, dry):
        self.dry = dry

    def __call__(self, cmd, env=None, timeout=None):
        """Runs cmd; None in a dry run (the command printed instead)."""
        if self.dry:
            prefix = "".join(f"{k}={shlex.quote(v)} " for k, v in
                             (env or {}).items())
            print("would run:", prefix + shlex.join(cmd))
            return None
        full_env = dict(os.environ, **(env or {}))
        try:
            return subprocess.run(cmd, capture_output=True, text=True,
                                  env=full_env, timeout=timeout)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(cmd, 124, "",
                                               f"timed out after {timeout} s")


def tail(p, n=100):
    text = (p.stderr.strip() or p.stdout.strip()).replace("\n", " / ")
    return text[-n:]


def torch_row(a, run, shape, label, mode, recipe):
    args = []
    for key, value in shape["torch_args"].items():
        values = value if isinstance(value, list) else [value]
        args += [f"--{key}"] + [str(v) for v in values]
    if shape["tie"]:
        args.append("--tie")
    if recipe:
        args += ["--fp8-linears",
                 f"{a.plans}/{shape['fp8_linears'][recipe]['file']}"]
    env = None
    if mode.startswith("torchao-"):
        env = {"PYTHONPATH": os.pathsep.join(
            p for p in (a.torchao, os.environ.get("PYTHONPATH")) if p)}
    cmd = [a.python, f"{a.root}/bench/gpu/torch_step.py", *args,
           "--mode", mode]
    p = run(cmd, env=env, timeout=TORCH_TIMEOUT_S)
    if p is None:
        return None
    row = {"label": label}
    try:
        r = json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        row["failure"] = f"exit {p.returncode}: {tail(p)}"
        return row
    row.update(tokens_per_s=r["tokens_per_s"], peak=r["peak_bytes"],
               first_step_s=r["first_step_s"], first_loss=r["first_loss"])
    if r["params"] != shape["params"]:
        row["note"] = (f"torch's model has {r['params']} parameters, "
                       f"Kiln's plan {shape['params']}")
    return row


def kiln_run(a, run, plan, out, extra):
    p = run([f"{a.build}/bin/kiln-run", plan, "--backend", "cuda",
             "--data", f"{a.plans}/data.txt", "--out", out, "--overwrite",
             "--no-check-numerics", "--no-final-checkpoint", *extra])
    # No checkpoint is written (the whole state would be 23 GiB for the 8B
    # stack); only the metrics are kept.
    return p


def kiln_row(a, run, shape, recipe, traces):
    name = shape["shape"]
    plan = f"{a.plans}/{name}-{recipe}.kplan"
    out = f"{a.plans}/run-{name}-{recipe}"
    p = kiln_run(a, run, plan, out, ["--steps", str(KILN_STEPS)])
    trace = f"{a.plans}/trace-{name}-{recipe}.json"
    # The same plan traced: eager, an event around each action.
    t = kiln_run(a, run, plan, out + "-traced",
                 ["--steps", str(KILN_TRACED_STEPS), "--trace", trace])
    if p is None:
        return None
    row = {"label": f"{name} kiln-{recipe}"}
    if p.returncode != 0:
        row["failure"] = f"exit {p.returncode}: {tail(p)}"
        return row
    with open(f"{out}/metrics.jsonl") as f:
        steps = [json.loads(l) for l in f if '"tokens_per_s"' in l]
    tps = statistics.median(x["tokens_per_s"] for x in steps[5:])
    seq = shape["torch_args"]["seq"] * shape["torch_args"]["batch"]
    m = re.search(r"device memory: (.*?) predicted, .*? ([0-9.]+ \w+) in use",
                  p.stdout)
    row.update(tokens_per_s=tps, peak=m.group(2) if m else None,
               predicted=m.group(1) if m else None,
               first_step_s=seq / steps[0]["tokens_per_s"],
               first_loss=steps[0].get("loss"))
    traces.append((f"{name} kiln-{recipe}",
                   trace if t.returncode == 0 else None,
                   seq / tps * 1000, tail(t, 120)))
    return row


def cell(x, fmt):
    return fmt % x if isinstance(x, (int, float)) else (x or "-")


def print_table(bench, rows):
    shapes = {s["shape"]: s for s in bench["shapes"]}
    print("| shape | run | tokens/s | model TFLOP/s | MFU (989 BF16) | "
          "of FP8 peak (1979) | peak memory | Kiln predicted | first step |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        name, run = r["label"].split(" ", 1)
        fpt = shapes[name]["flops_per_token"]
        tps = r.get("tokens_per_s")
        tf = tps * fpt if tps else None
        recipe = next((r for r in ("tensorwise", "rowwise") if r in run), None)
        fp8 = recipe is not None
        what = DESCRIPTIONS[run]
        if fp8:
            what += (f" ({shapes[name]['fp8_linears'][recipe]['count']} of "
                     f"{shapes[name]['linears']} linears)")
        peak = r.get("peak")
        peak = f"{peak / 2**30:.1f} GiB" if isinstance(peak, int) else peak
        if "failure" in r:
            print(f"| {name} | {what} | failed: "
                  f"{r['failure'].replace('|', '/')} | | | | | | |")
            continue
        print(f"| {name} | {what} | {cell(tps, '%.0f')} | "
              f"{cell(tf / 1e12 if tf else None, '%.1f')} | "
              f"{cell(100 * tf / BF16_PEAK if tf else None, '%.1f%%')} | "
              f"{cell(100 * tf / FP8_PEAK if tf and fp8 else None, '%.1f%%')} | "
              f"{peak or '-'} | {r.get('predicted') or '-'} | "
              f"{cell(r.get('first_step_s'), '%.2f s')} |")
    notes = [r for r in rows if "note" in r]
    for r in notes:
        print(f"\nnote, {r['label']}: {r['note']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--plans", required=True)
    ap.add_argument("--torchao", required=True,
                    help="folder with the unpacked torchao wheel")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--only", default="")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    only = re.compile(a.only)
    run = Runner(a.dry_run)
    with open(f"{a.plans}/bench.json") as f:
        bench = json.load(f)
    missing = [f"{a.plans}/{s['shape']}-{r}.kplan" for s in bench["shapes"]
               for r in KILN_RUNS
               if not os.path.exists(f"{a.plans}/{s['shape']}-{r}.kplan")]
    if missing:
        sys.exit(f"error: {missing[0]} missing: run bench/gpu/run --prepare")
    rows, traces = [], []
    for shape in bench["shapes"]:
        todo = [(f"{shape['shape']} {label}", "torch", (label, mode, recipe))
                for label, mode, recipe in TORCH_RUNS]
        todo += [(f"{shape['shape']} kiln-{r}", "kiln", r) for r in KILN_RUNS]
        for label, kind, what in todo:
            if not only.search(label):
                continue
            print(f"-- {label}", file=sys.stderr, flush=True)
            began = time.monotonic()
            if kind == "torch":
                row = torch_row(a, run, shape, label, what[1], what[2])
            else:
                row = kiln_row(a, run, shape, what, traces)
            if row is None:
                continue
            row["wall_s"] = round(time.monotonic() - began, 1)
            rows.append(row)
            with open(f"{a.plans}/results.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
    if not a.dry_run:
        print_table(bench, rows)
    # Where Kiln's time goes (bench/gpu/breakdown.py on each traced run).
    for title, trace, graph_ms, failure in traces:
        print(f"\n### {title}\n")
        if trace is None:
            print(f"traced run failed: {failure}")
            continue
        b = subprocess.run([a.python, f"{a.root}/bench/gpu/breakdown.py",
                            trace, "--graph-step-ms", f"{graph_ms:.3f}"],
                           capture_output=True, text=True)
        print(b.stdout.strip() or b.stderr.strip())
    if a.dry_run:
        for s in bench["shapes"]:
            for r in KILN_RUNS:
                if only.search(f"{s['shape']} kiln-{r}"):
                    print("would run:", shlex.join(
                        [a.python, f"{a.root}/bench/gpu/breakdown.py",
                         f"{a.plans}/trace-{s['shape']}-{r}.json",
                         "--graph-step-ms", "STEP_MS"]))
    if only.search("gemm-bench"):
        # Each GEMM of these layers, Kiln's wrapper against cuBLASLt's best
        # algorithm for the same descriptors.
        p = run([f"{a.build}/bin/kiln-gemm-bench", "--dtype", "all"])
        if p is not None:
            print("\nEach GEMM of the benchmark's layers, Kiln's wrapper "
                  "against cuBLASLt's best\nalgorithm for the same "
                  "descriptors (kiln-gemm-bench --dtype all):\n")
            print(p.stdout.strip() or tail(p, 400))


if __name__ == "__main__":
    main()
