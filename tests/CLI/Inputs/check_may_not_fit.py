"""kiln plan --json: every row's may_not_fit is exactly "extrapolated, and
its peak within 8% below the GPU's memory" (tests/CLI/plan.test), and
whether some rows are flagged and some are not."""
import json
import sys

plan = json.load(open(sys.argv[1]))
hbm = plan["hbm_gib"]
rows = plan["top"]
consistent = all(
    r["may_not_fit"] == (not r["exact"] and r["peak_memory_gib"] > 0.92 * hbm)
    for r in rows)
print("consistent", consistent,
      "flagged", any(r["may_not_fit"] for r in rows),
      "clear", any(not r["may_not_fit"] for r in rows))
