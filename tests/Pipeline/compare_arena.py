#!/usr/bin/env python3
"""The plan's arena is the one kiln-assign-buffers wrote into the IR.

    compare_arena.py SCHEDULE.mlir PLAN.kplan

SCHEDULE.mlir is `kiln compile --emit=schedule`'s output and PLAN.kplan
the plan of the same model. For every function that becomes an entry, its
kiln.arena_bytes and kiln.live_at_peak must be the entry's arena_bytes and
live_at_peak; the offsets of all ops' kiln.arena_offsets must be,
as a multiset, the offsets of the plan's arena values that are buffers of
their own (a view, `view_of`, is its buffer's bytes and has no op of its
own in the IR's arena). Prints one line per entry and one for the buffers.
"""

import collections
import json
import re
import sys

ENTRIES = {"train_step": "train_step", "forward_loss": "eval_loss",
           "loss_and_grads": "loss_and_grads", "forward_logits": "logits",
           "fp8_calibration": "fp8_calibration"}


def main():
    ir = open(sys.argv[1]).read()
    plan = json.load(open(sys.argv[2]))
    failures = 0
    offsets = collections.Counter()
    for func in re.split(r"\n(?=  func\.func @)", ir)[1:]:
        name = re.match(r"  func\.func @(\w+)", func).group(1)
        arena = re.search(r"kiln\.arena_bytes = (\d+) : i64", func)
        peak = re.search(r"kiln\.live_at_peak = \{([^}]*)\}", func)
        if not arena or not peak:
            print(f"error: @{name} has no kiln.arena_bytes or "
                  "kiln.live_at_peak")
            failures += 1
            continue
        live = {k: int(v) for k, v in
                re.findall(r"(\w+) = (\d+) : i64", peak.group(1))}
        entry = plan["entries"][ENTRIES[name]]
        if int(arena.group(1)) != entry["arena_bytes"] or \
                live != entry["live_at_peak"]:
            print(f"error: @{name}: IR {arena.group(1)} bytes {live}, plan "
                  f"{entry['arena_bytes']} bytes {entry['live_at_peak']}")
            failures += 1
        print(f"@{name} -> {ENTRIES[name]}: arena {arena.group(1)} bytes, "
              f"peak at step {live['peak_step']}")
        for arr in re.findall(r"kiln\.arena_offsets = array<i64: ([\d, ]+)>",
                              func):
            offsets.update(int(o) for o in arr.split(", "))
    planned = collections.Counter(v["offset"] for v in plan["values"]
                                  if v["kind"] == "arena" and
                                  "view_of" not in v)
    if offsets != planned:
        print(f"error: the IR places {sum(offsets.values())} buffers, the "
              f"plan {sum(planned.values())}; they differ at "
              f"{sorted((offsets - planned) + (planned - offsets))[:10]}")
        failures += 1
    print(f"buffers: {sum(planned.values())}, at the offsets the IR gives")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
