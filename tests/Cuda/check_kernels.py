#!/usr/bin/env python3
"""Checks kiln-nvrtc-check's counts against what the plans say.

    check_kernels.py OUTPUT CACHE PLAN...

OUTPUT is what kiln-nvrtc-check printed for the PLANs (in that order, from
an empty CACHE). For each plan, from its JSON alone: the fused steps of all
its entries (the "fused groups" the tool must report), and the kernels
they need, one per distinct group body, outputs and operand/result dtypes,
in the mapping GroupKernelSource.h chooses (by rows for a group with a
row_sum, a row_max or a col_sum output, else one thread per point), a
group with a col_sum output with a second kernel, kiln_group_col_sum. The
shape is a kernel argument, but a rows kernel's layout follows from the
width (rows_layout, as groupRows decides it), so rows kernels of one
body but two layouts are two kernels.
Kernels an earlier plan needed are not compiled again. Then the CACHE must
hold one CUBIN per kernel compiled plus the op kernel library, each group
CUBIN with one kiln_group and, for a col_sum group, one
kiln_group_col_sum. Prints one line per plan with the counts by kind.
"""

import json
import os
import re
import sys

ROW_OPS = {"row_sum", "row_max"}


def row_sum_partials(cols):
    """The plan's row_sum partials (docs/plan.md): a power of two in
    [32, 1024], the largest not above cols / 16."""
    p = 32
    while p < 1024 and 2 * p * 16 <= cols:
        p *= 2
    return p


def rows_layout(group):
    """What a rows kernel's source depends on besides the body: threads per
    row, rows per block, rows in turn, partials, chunks per thread, and
    whether the loads stay in registers (GroupKernelSource.h, GroupRows)."""
    cols = group["cols"]
    stores = {o["store"] for o in group["outputs"]}
    loads = sum(1 for i in group["body"]
                if i["op"] == "load" and i["kind"] == "elem")
    partials = row_sum_partials(cols)

    def chunks(threads):
        return max(1, -(-cols // (8 * threads)))

    if "transpose" in stores or ("col_sum" in stores and chunks(partials) > 4):
        return (32, 32, 1, partials, chunks(32), False)
    return (partials, max(1, 256 // partials),
            8 if "col_sum" in stores else 1, partials, chunks(partials),
            loads * chunks(partials) * 8 <= 64)


def kernels_of(plan):
    """The fused steps of a plan, and for each its kernel key and mapping."""
    dtypes = {v["id"]: v["dtype"] for v in plan["values"]}
    steps = []
    for entry in plan["entries"].values():
        for step in entry["steps"]:
            if step["op"] != "fused":
                continue
            group = {k: v for k, v in step["group"].items()
                     if k not in ("rows", "cols")}
            col_sum = any(o["store"] == "col_sum" for o in group["outputs"])
            rows = col_sum or any(i["op"] in ROW_OPS for i in group["body"])
            key = json.dumps(
                [group, [dtypes[i] for i in step["operands"]],
                 [dtypes[i] for i in step["results"]],
                 rows_layout(step["group"]) if rows else None], sort_keys=True)
            steps.append((key, "rows" if rows else "tiles", col_sum))
    return steps


def main():
    output, cache, plans = sys.argv[1], sys.argv[2], sys.argv[3:]
    reported = {}
    line_re = re.compile(r"^(.*): (\d+) fused groups, (\d+) new kernels "
                         r"compiled for \S+, (\d+) from the cache$")
    for line in open(output):
        m = line_re.match(line.rstrip("\n"))
        if m:
            reported[os.path.realpath(m.group(1))] = tuple(int(g) for g in m.group(2, 3, 4))
    failures = 0
    seen = set()
    col_sum_kernels = 0
    for path in plans:
        with open(path) as f:
            steps = kernels_of(json.load(f))
        fresh = {}
        for key, mapping, col_sum in steps:
            if key not in seen:
                seen.add(key)
                fresh[key] = (mapping, col_sum)
        tiles = sum(1 for m, _ in fresh.values() if m == "tiles")
        rows = sum(1 for m, _ in fresh.values() if m == "rows")
        sums = sum(1 for _, c in fresh.values() if c)
        col_sum_kernels += sums
        name = os.path.basename(path)
        print(f"{name}: {len(steps)} fused groups; {len(fresh)} new group "
              f"kernels: {tiles} one thread per point, {rows} by rows "
              f"({sums} with kiln_group_col_sum)")
        got = reported.get(os.path.realpath(path))
        want = (len(steps), len(fresh), 0)
        if got != want:
            print(f"error: {name}: kiln-nvrtc-check reported (groups, new, "
                  f"cached) = {got}, the plan says {want}")
            failures += 1

    cubins = [os.path.join(cache, f) for f in sorted(os.listdir(cache))
              if f.endswith(".cubin")]
    # Symbol names in a CUBIN's string table end with a NUL byte.
    groups = col_sums = 0
    for path in cubins:
        data = open(path, "rb").read()
        groups += data.count(b"\0kiln_group\0")
        col_sums += data.count(b"\0kiln_group_col_sum\0")
    print(f"cache: {len(cubins)} CUBINs, {groups} kiln_group, "
          f"{col_sums} kiln_group_col_sum")
    if len(cubins) != len(seen) + 1:
        print(f"error: the cache holds {len(cubins)} CUBINs; the plans need "
              f"{len(seen)} group kernels and the op kernel library")
        failures += 1
    if groups != len(seen) or col_sums != col_sum_kernels:
        print(f"error: the CUBINs define {groups} kiln_group and {col_sums} "
              f"kiln_group_col_sum; the plans need {len(seen)} and "
              f"{col_sum_kernels}")
        failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
