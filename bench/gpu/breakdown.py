#!/usr/bin/env python3
"""Per-category time of a traced CUDA run (kiln-run --backend cuda --trace).

A traced CUDA run is eager and names each action's trace event
"<category>: <kernel> op N, <step>" (CudaExecutor, actionCategory), its
duration the stream time between the events around it. This prints, per
training step, each category's time and share, the stream time they add up
to, and the host's wall time of the entry. With --graph-step-ms (the same
plan's step time with CUDA graphs, from bench/gpu/run's table) it also
prints the launch overhead that graphs remove: the eager step minus it.

    breakdown.py TRACE.json [--entry train_step] [--skip 1] [--graph-step-ms X]
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--entry", default="train_step")
    ap.add_argument("--skip", type=int, default=1,
                    help="leading runs of the entry to leave out (warm-up)")
    ap.add_argument("--graph-step-ms", type=float)
    args = ap.parse_args()
    try:
        events = json.load(open(args.trace))["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"error: {args.trace}: not a trace ({e})")
    complete = sorted((e for e in events if e.get("ph") == "X"),
                      key=lambda e: e["ts"])
    # Entry events (no category) frame the runs; actions fall inside them.
    runs = [e for e in complete if e["name"] == args.entry]
    runs = runs[args.skip:]
    if not runs:
        sys.exit(f"error: {args.trace}: no '{args.entry}' run after the "
                 f"first {args.skip}")
    by_category = {}
    for run in runs:
        begin, end = run["ts"], run["ts"] + run["dur"]
        for e in complete:
            if ":" not in e["name"] or not begin <= e["ts"] < end:
                continue
            category = e["name"].split(":", 1)[0]
            by_category[category] = by_category.get(category, 0.0) + e["dur"]
    n = len(runs)
    stream = sum(by_category.values()) / n / 1000
    wall = sum(r["dur"] for r in runs) / n / 1000
    if stream == 0:
        sys.exit(f"error: {args.trace}: no timed actions (a CUDA run with "
                 "--trace names them '<category>: ...')")
    print(f"{args.entry}, {n} runs, eager with an event around each action:")
    print()
    print("| category | ms per step | share |")
    print("|---|---:|---:|")
    for category, us in sorted(by_category.items(), key=lambda kv: -kv[1]):
        ms = us / n / 1000
        print(f"| {category} | {ms:.3f} | {100 * ms / stream:.1f}% |")
    print(f"| stream time (sum) | {stream:.3f} | 100.0% |")
    print(f"| host wall time of the entry | {wall:.3f} | |")
    if args.graph_step_ms is not None:
        print(f"| launch overhead (eager step - graph step) | "
              f"{wall - args.graph_step_ms:.3f} | |")


if __name__ == "__main__":
    main()
