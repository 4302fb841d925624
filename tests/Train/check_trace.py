"""Reads a Chrome trace written by --trace (independently of Kiln): counts
the compute events and the communication events of each mesh axis's track
(named by the trace's thread_name records), and measures how much of the
communication time overlaps compute. Fails unless compute and some
communication have events and some communication time overlaps compute."""
import json
import sys

events = json.load(open(sys.argv[1]))["traceEvents"]
names = {e["tid"]: e["args"]["name"] for e in events
         if e.get("ph") == "M" and e["name"] == "thread_name"}
spans = {tid: [] for tid in names}
for e in events:
    if e.get("ph") == "X":
        spans[e["tid"]].append((e["ts"], e["ts"] + e["dur"], e["name"]))
compute = sorted(spans[[t for t, n in names.items() if n == "compute"][0]])
tracks = sorted((n, spans[t]) for t, n in names.items()
                if n.startswith("communication") and spans[t])
comm = [s for _, track in tracks for s in track]
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
for name, track in tracks:
    print("track '%s': %d events (%s)" % (
        name, len(track), ", ".join(sorted({n.split()[0] for _, _, n in track}))))
print("communication overlapping compute: %.0f%% of %.1f ms"
      % (100 * overlap / total if total else 0, total / 1000))
if not compute or not comm or overlap <= 0:
    sys.exit("no overlap of communication and compute")
