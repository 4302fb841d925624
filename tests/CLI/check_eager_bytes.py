"""Checks what `kiln explain --perf --no-fuse` adds for eager PyTorch,
independently of Kiln: from the unfused plan's train_step and the
profile's [eager] table, the extra bytes of every step whose op the table
lists (its bytes per element times the elements of its largest operand or
result, less what the plan's own kernel moves), at the hardware's
bandwidth and the profile's memory share, are the difference between the
memory-bound time priced with the table and without it.

With `loss` after the bandwidth, only the loss's steps (cross entropy,
unsharded or vocab-parallel, and its gradient) are priced so: what
`--eager-loss` adds to a fused plan.

usage: check_eager_bytes.py PLAN PROFILE EAGER_JSON PLAIN_JSON HBM_GB_PER_S
       [loss]"""
import json
import sys
import tomllib

plan = json.load(open(sys.argv[1]))
profile = tomllib.load(open(sys.argv[2], "rb"))
eager, plain = (json.load(open(f)) for f in sys.argv[3:5])
bandwidth = float(sys.argv[5]) * 1e9 * profile["memory"]
table = profile["eager"]
loss_only = sys.argv[6:] == ["loss"]
size = {"bf16": 2, "f32": 4, "i32": 4, "f8e4m3": 1, "f8e5m2": 1}
values = {v["id"]: v for v in plan["values"]}


def elements(i):
    n = 1
    for d in values[i]["shape"]:
        n *= d
    return n


extra, priced = 0, 0
for step in plan["entries"]["train_step"]["steps"]:
    op = step["op"]
    if op == "fused":
        op = step["attrs"]["ops"] if "," not in step["attrs"]["ops"] else ""
    if op not in table:
        continue
    if loss_only and not op.startswith(("cross_entropy", "vocab_parallel_")):
        continue
    ids = step["operands"] + step["results"]
    moved = sum(elements(i) * size[values[i]["dtype"]] for i in ids)
    largest = max(elements(i) for i in ids)
    extra += max(0, int(table[op] * largest) - moved)
    priced += 1
seconds = (eager["compute_by_kind_s"]["memory"] -
           plain["compute_by_kind_s"]["memory"])
assert priced > 0 and extra > 0
assert abs(seconds * bandwidth - extra) <= 1e-9 * extra, (seconds * bandwidth,
                                                          extra)
print("eager bytes: %d steps priced, %d extra bytes" % (priced, extra))
