"""Compares train_step's memory in two plans: the second may exceed the
first by at most --within (a fraction). --live compares the bytes live at
the peak (AssignBuffers' live_at_peak) instead of the arena's size."""
import argparse
import json
import sys


def size(path, live):
    entry = json.load(open(path))["entries"]["train_step"]
    if not live:
        return entry["arena_bytes"]
    peak = entry["live_at_peak"]
    return peak["activations"] + peak["gradients"] + peak["parameter_copies"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("base")
    parser.add_argument("other")
    parser.add_argument("--within", type=float, required=True)
    parser.add_argument("--live", action="store_true")
    args = parser.parse_args()
    base, other = size(args.base, args.live), size(args.other, args.live)
    if other > base * (1 + args.within):
        sys.exit(f"the step grows: {base} bytes, then {other}")
    print(f"arena does not grow: {base} bytes, then {other}")


main()
