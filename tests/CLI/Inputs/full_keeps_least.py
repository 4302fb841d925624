"""Full checkpointing's peak against every other mode's, compiled whole.

kiln plan drops every checkpointing mode of a microbatch size once full
checkpointing does not fit there (docs/perf-model.md, "Full checkpointing
first"). That rests on full keeping the least: this compiles each mode of
each configuration given and prints one line per configuration where a
mode peaks below full, then a summary. The margins are of the state and
the arena, without the profile's reserve (the same for every mode).

usage: full_keeps_least.py KILN PROFILE MODEL GPUS [--set KEY=VALUE ...]
                           -- CONFIG...
  CONFIG: tp,pp,schedule,recipe (schedule '-' without pp; recipe bf16,
  tensorwise, tensorwise-ag or rowwise)
"""

import json
import subprocess
import sys

MODES = [("none", None), ("selective", "gemm"), ("selective", "op"),
         ("selective", "2"), ("full", None)]


def peak(kiln, profile, model, gpus, base, tp, pp, schedule, recipe, mode, policy):
    sets = list(base) + [
        "parallelism.tensor_parallel_degree=%d" % tp,
        "parallelism.pipeline_parallel_degree=%d" % pp,
        'activation_checkpoint.mode="%s"' % mode,
    ]
    if pp > 1:
        sets.append('parallelism.pipeline_parallel_schedule="%s"' % schedule)
    if policy:
        sets.append('activation_checkpoint.selective_ac_option="%s"' % policy)
    if recipe != "bf16":
        sets += ["float8.enable=true",
                 'float8.recipe="%s"' % recipe.replace("-ag", ""),
                 "float8.enable_fsdp_float8_all_gather=%s" %
                 ("true" if recipe.endswith("-ag") else "false")]
    command = [kiln, "explain", "--perf", model, "--gpus", str(gpus),
               "--hardware", "h100-hbm2e-500w", "--efficiency", profile,
               "--json"]
    for s in sets:
        command += ["--set", s]
    out = subprocess.run(command, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("error: %s: %s" % (" ".join(command), out.stderr.strip()))
    return json.loads(out.stdout)["peak_memory_gib"]


def main():
    kiln, profile, model = sys.argv[1], sys.argv[2], sys.argv[3]
    gpus = int(sys.argv[4])
    rest = sys.argv[5:]
    reserved = None
    for line in open(profile):
        if line.split("=")[0].strip() == "reserved_gib":
            reserved = float(line.split("=")[1].split("#")[0])
    if reserved is None:
        sys.exit("error: %s: no reserved_gib" % profile)
    split = rest.index("--")
    base = [rest[i + 1] for i in range(0, split, 2) if rest[i] == "--set"]
    configs = rest[split + 1:]
    checked = below = 0
    least = None  # the smallest margin of a mode over full, relative
    for config in configs:
        tp, pp, schedule, recipe = config.split(",")
        tp, pp = int(tp), int(pp)
        peaks = {}
        for mode, policy in MODES:
            # TorchTitan's layer policy is searched without pp only.
            if policy == "2" and pp > 1:
                continue
            peaks[policy or mode] = peak(
                kiln, profile, model, gpus, base, tp, pp, schedule, recipe,
                mode, policy) - reserved
        full = peaks.pop("full")
        checked += 1
        for name, p in sorted(peaks.items()):
            margin = (p - full) / full
            least = margin if least is None else min(least, margin)
            if p < full:
                below += 1
                print("%s: %s holds %.6f GiB, below full's %.6f" %
                      (config, name, p, full))
    print("configurations %d, modes below full %d, least margin %+.2f%%" %
          (checked, below, 100 * least))


main()
