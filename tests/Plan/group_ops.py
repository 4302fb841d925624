"""Prints, for one entry of a Kiln plan, each fused step's ops in order (one
group per line), then how many steps are fused and how many of them hold
more than one op."""
import json
import sys

plan = json.load(open(sys.argv[1]))
steps = plan["entries"][sys.argv[2]]["steps"]
fused = [s for s in steps if s["op"] == "fused"]
for s in fused:
    if "," in s["attrs"]["ops"]:
        print("group: " + s["attrs"]["ops"])
print("fused steps: %d, with several ops: %d"
      % (len(fused), sum("," in s["attrs"]["ops"] for s in fused)))
loose = sorted({s["op"] for s in steps} &
               {"add", "mul", "silu", "silu_grad", "cast", "rms_norm", "rms_norm_grad"})
print("elementwise ops outside groups: " + (", ".join(loose) or "none"))
