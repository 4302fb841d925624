"""Checks `kiln plan --json`: the list is sorted by predicted tokens/s per
GPU, every configuration listed fits the GPU's memory, the first has the
expected mesh, and (with --exact) the whole compiles agree with the
extrapolation from the probes (3 and 4 layers per stage, or a layer
policy's period apart) within the given bounds.

usage: check_plan_json.py PLAN.json PP DP_SHARD TP [--step-tol X --memory-tol Y
                          --exposed-tol Z]
(Z bounds the exposed communication's error over the step time.)
"""
import argparse
import json
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("plan")
    parser.add_argument("pp", type=int)
    parser.add_argument("dp_shard", type=int)
    parser.add_argument("tp", type=int)
    parser.add_argument("--step-tol", type=float)
    parser.add_argument("--memory-tol", type=float)
    parser.add_argument("--exposed-tol", type=float)
    args = parser.parse_args()
    plan = json.load(open(args.plan))
    top = plan["top"]
    if not top:
        sys.exit("no configuration listed")
    speeds = [row["tokens_per_s_per_gpu"] for row in top]
    if speeds != sorted(speeds, reverse=True):
        sys.exit(f"not sorted by tokens/s per GPU: {speeds}")
    for row in top:
        if row["peak_memory_gib"] > plan["hbm_gib"]:
            sys.exit(f"listed but does not fit: {row['peak_memory_gib']} GiB "
                     f"of {plan['hbm_gib']}")
        tokens = plan["global_batch_size"] * plan["seq_len"]
        gpus = plan["gpus"]
        derived = tokens / row["step_time_s"] / gpus
        if abs(derived - row["tokens_per_s_per_gpu"]) > 1e-6 * derived:
            sys.exit(f"tokens/s per GPU {row['tokens_per_s_per_gpu']} is not "
                     f"the step's {derived}")
        mesh = row["mesh"]
        if mesh["pp"] * mesh["dp_shard"] * mesh["tp"] != gpus:
            sys.exit(f"mesh {mesh} is not {gpus} GPUs")
    first = dict(sorted(top[0]["mesh"].items()))
    want = {"dp_shard": args.dp_shard, "pp": args.pp, "tp": args.tp}
    if first != want:
        sys.exit(f"first configuration's mesh is {first}, expected {want}")
    worst_step = worst_memory = worst_exposed = 0.0
    for row in top:
        if "extrapolated" not in row:
            continue
        e = row["extrapolated"]
        worst_step = max(worst_step, abs(e["step_time_s"] / row["step_time_s"] - 1))
        worst_memory = max(worst_memory,
                           abs(e["peak_memory_gib"] / row["peak_memory_gib"] - 1))
        worst_exposed = max(worst_exposed,
                            abs(e["exposed_comm_s"] - row["exposed_comm_s"]) /
                            row["step_time_s"])
    if args.step_tol is not None and worst_step > args.step_tol:
        sys.exit(f"extrapolated step time off by {worst_step:.2e}")
    if args.memory_tol is not None and worst_memory > args.memory_tol:
        sys.exit(f"extrapolated peak memory off by {worst_memory:.2e}")
    if args.exposed_tol is not None and worst_exposed > args.exposed_tol:
        sys.exit(f"extrapolated exposed communication off by {worst_exposed:.2e}"
                 " of the step")
    print(f"plan json: {len(top)} configurations, first {first}; "
          f"extrapolation off by at most {worst_step:.1e} (step), "
          f"{worst_memory:.1e} (memory), {worst_exposed:.1e} of the step "
          f"(exposed communication)")


main()
