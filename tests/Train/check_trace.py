"""Reads a Chrome trace written by --trace (independently of Kiln): counts
the compute and communication events and measures how much of the
communication time overlaps compute. Fails unless both tracks have events
and some communication time overlaps compute."""
import json
import sys

events = json.load(open(sys.argv[1]))["traceEvents"]
spans = {1: [], 2: []}
for e in events:
    if e.get("ph") == "X":
        spans[e["tid"]].append((e["ts"], e["ts"] + e["dur"], e["name"]))
compute = sorted(spans[1])
comm = spans[2]
total = overlap = 0.0
for begin, end, _ in comm:
    total += end - begin
    for cb, ce, _ in compute:
        if cb >= end:
            break
        overlap += max(0.0, min(end, ce) - max(begin, cb))
kinds = sorted({name.split()[0] for _, _, name in comm})
print("compute events: %d, communication events: %d (%s)"
      % (len(compute), len(comm), ", ".join(kinds)))
print("communication overlapping compute: %.0f%% of %.1f ms"
      % (100 * overlap / total if total else 0, total / 1000))
if not compute or not comm or overlap <= 0:
    sys.exit("no overlap of communication and compute")
