"""Compares an FP8 run's metrics.jsonl with a BF16 run's.

Checks that every loss is finite, that the step-1 losses differ (the FP8
GEMMs really ran), and that the mean of the last N validation losses is
within --rel (relative) of the BF16 run's. Prints one line; exits 1 with
the reason otherwise.
"""
import argparse
import json
import math
import sys


def read(path):
    train, val = {}, []
    with open(path) as f:
        for line in f:
            m = json.loads(line)
            if "loss" in m:
                train[m["step"]] = m["loss"]
            if "val_loss" in m:
                val.append(m["val_loss"])
    return train, val


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bf16")
    p.add_argument("fp8")
    p.add_argument("--rel", type=float, required=True)
    p.add_argument("--last", type=int, default=1)
    a = p.parse_args()
    bt, bv = read(a.bf16)
    ft, fv = read(a.fp8)
    for name, losses in (("bf16", list(bt.values()) + bv),
                         ("fp8", list(ft.values()) + fv)):
        if not losses or not all(math.isfinite(x) for x in losses):
            sys.exit(f"{name}: a loss is not finite (or there is none)")
    if bt.get(1) == ft.get(1):
        sys.exit(f"step-1 losses are equal ({bt.get(1)}): FP8 did not run")
    if len(bv) < a.last or len(fv) < a.last:
        sys.exit(f"fewer than {a.last} validation losses")
    b = sum(bv[-a.last:]) / a.last
    f = sum(fv[-a.last:]) / a.last
    rel = abs(f - b) / b
    print(f"step 1: bf16 {bt[1]:.6f} fp8 {ft[1]:.6f}; validation (mean of "
          f"last {a.last}): bf16 {b:.4f} fp8 {f:.4f}, {rel * 100:.2f}% apart")
    if rel > a.rel:
        sys.exit(f"more than {a.rel * 100:.2f}% apart")


if __name__ == "__main__":
    main()
