#!/usr/bin/env python3
"""mutate_plan.py IN OUT CASE: writes IN's plan with one hostile change, the
cases adversarial testing found (issue 14), each aimed at one check of the
runtime's plan verifier. Cases name the first step of train_step of its
kind; offsets and ids come from the plan itself."""
import json
import sys

src, dst, case = sys.argv[1:4]
plan = json.load(open(src))
values = plan["values"]
train = plan["entries"]["train_step"]["steps"]


def first(op, steps=train):
    return next(s for s in steps if s["op"] == op)


def first_index(op, steps=train):
    return next(i for i, s in enumerate(steps) if s["op"] == op)


text = None
if case == "offset-overflow":
    # An arena offset of 2^63 - 1: offset + bytes overflows int64.
    v = next(v for v in values if v["kind"] == "arena")
    v["offset"] = 2**63 - 1
elif case == "missing-attribute":
    del first("attention")["attrs"]["scale"]
elif case == "mistyped-attribute":
    first("rope")["attrs"]["theta"] = "ten thousand"
elif case == "operand-count":
    first("linear")["operands"].pop()
elif case == "small-state":
    # exp_avg of the first AdamW update declared with half its elements.
    state = values[first("adamw")["operands"][2]]
    half = state["shape"][0] // 2
    plan["state_bytes"] -= (state["shape"][0] - half) * 4 * (
        state["shape"][1] if len(state["shape"]) > 1 else 1)
    state["shape"][0] = half
elif case == "relabelled-group":
    # A fused group relabelled as a library op.
    first("fused")["op"] = "linear"
elif case == "fractional-id":
    first("cross_entropy")["results"] = [-0.5]
elif case == "huge-arena":
    # 1 TB of arena: valid, but no machine here has it.
    plan["arena_bytes"] = 10**12
    plan["entries"]["train_step"]["arena_bytes"] = 10**12
elif case == "eval-steps":
    plan["training"]["eval_steps"] = 2**32
elif case == "overlap":
    # The learning rate written where the loss lives: both are outputs,
    # live to the end of the step.
    out = plan["entries"]["train_step"]["outputs"]
    values[out["lr"]]["offset"] = values[out["loss"]]["offset"]
elif case == "deleted-step":
    # The loss's gradient step deleted; the next step reads its result.
    del train[first_index("cross_entropy_grad")]
elif case == "vocab":
    plan["vocab_size"] += 1
elif case == "axis-tp":
    # The first all-gather over tp, whose size in the mesh is not its ranks.
    first("all_gather_start")["attrs"]["axis"] = "tp"
elif case == "axis-unknown":
    first("all_gather_start")["attrs"]["axis"] = "ep"
elif case == "axis-missing":
    del first("all_gather_start")["attrs"]["axis"]
elif case == "mesh-product":
    plan["mesh"]["tp"] = 2
elif case == "mesh-missing":
    del plan["mesh"]
elif case == "view-written":
    # A step writing a view (version 7): its bytes are another value's.
    view, step = next((v, s) for v in values if "view_of" in v
                      for s in train if s["results"] and
                      values[s["results"][0]]["shape"] == v["shape"] and
                      values[s["results"][0]]["dtype"] == v["dtype"])
    step["results"][0] = view["id"]
elif case == "view-offset":
    # A view away from its buffer's bytes.
    view = next(v for v in values if "view_of" in v)
    view["offset"] += 64
elif case == "view-forward":
    # A view of a later value.
    view = next(v for v in values if "view_of" in v)
    view["view_of"] = view["id"] + 1
elif case == "view-of-state":
    view = next(v for v in values if "view_of" in v)
    view["view_of"] = next(v["id"] for v in values if v["kind"] == "state")
elif case == "truncated":
    text = json.dumps(plan)[:1000]
else:
    sys.exit("unknown case " + case)
with open(dst, "w") as out:
    out.write(text if text is not None else json.dumps(plan))
