"""Checks structural properties of a Kiln plan and prints them as lines for
FileCheck: state and input inventory, in-place AdamW, that buffers live at
the same time never overlap in the arena, and def-before-use order. A view
(`view_of`, plan version 7) is its buffer's bytes: reading it reads the
buffer, and no step writes it."""
import json
import sys

plan = json.load(open(sys.argv[1]))
values = plan["values"]
states = [v for v in values if v["kind"] == "state"]
params = [s for s in states if s["init"]["kind"] != "zeros"]
print("states: %d (%d parameters, %d optimizer moments)"
      % (len(states), len(params), len(states) - len(params)))
print("inputs: " + " ".join(sorted(v["name"] for v in values if v["kind"] == "input")))

init = plan["entries"]["init"]["steps"]
seed = [v["id"] for v in values if v["kind"] == "input" and v["name"] == "seed"]
once = sorted(s["results"][0] for s in init) == sorted(s["id"] for s in states)
from_seed = all(s["op"] == "init" and s["operands"] == seed for s in init)
print("init: " + ("every state once" if once else "NOT every state once")
      + (", from the seed" if from_seed else ", NOT from the seed"))

def nbytes(v):
    n = 1
    for d in v["shape"]:
        n *= d
    return n * {"f32": 4, "bf16": 2, "f16": 2, "f64": 8, "i32": 4, "i64": 8}[v["dtype"]]

for name in ["train_step", "eval_loss"]:
    steps = plan["entries"][name]["steps"]
    ops = [s["op"] for s in steps]
    if name == "train_step":
        adamw = [s for s in steps if s["op"] == "adamw"]
        in_place = all(s["results"] == [s["operands"][0], s["operands"][2], s["operands"][3]]
                       for s in adamw)
        print("train_step: %d grad_norm, %d lr_schedule, %d adamw, %s"
              % (ops.count("grad_norm"), ops.count("lr_schedule"), len(adamw),
                 "every adamw in place" if in_place else "NOT in place"))
    else:
        print("eval_loss: " + ("no optimizer step" if "adamw" not in ops else "HAS adamw"))

def storage(i):
    return values[i].get("view_of", i)


views = [v for v in values if "view_of" in v]
overlap = any(values[v["view_of"]]["offset"] != v["offset"] or
              nbytes(values[v["view_of"]]) != nbytes(v) for v in views)
ordered = True
for name, entry in plan["entries"].items():
    steps = entry["steps"]
    defined = {v["id"] for v in values if v["kind"] != "arena"}
    live = {}  # id -> (first, last)
    for i, s in enumerate(steps):
        for o in map(storage, s["operands"]):
            if o not in defined:
                ordered = False
            if o in live:
                live[o] = (live[o][0], i)
        for r in s["results"]:
            if storage(r) != r:
                ordered = False
            defined.add(r)
            if values[r]["kind"] == "arena":
                live[r] = (i, i)
    for o in map(storage, entry["outputs"].values()):
        if o in live:
            live[o] = (live[o][0], len(steps))
    ids = sorted(live)
    for a in range(len(ids)):
        va = values[ids[a]]
        for b in range(a + 1, len(ids)):
            vb = values[ids[b]]
            la, lb = live[ids[a]], live[ids[b]]
            if la[1] < lb[0] or lb[1] < la[0]:
                continue
            if va["offset"] < vb["offset"] + nbytes(vb) and vb["offset"] < va["offset"] + nbytes(va):
                overlap = True
    if max((values[i]["offset"] + nbytes(values[i]) for i in ids), default=0) > entry["arena_bytes"]:
        overlap = True
print("arena: " + ("BUFFERS OVERLAP" if overlap else "no two live buffers overlap"))
print("every operand is defined before use" if ordered else "USE BEFORE DEFINITION")
