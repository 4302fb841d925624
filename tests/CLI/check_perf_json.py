"""Checks `kiln explain --perf --json` field by field, independently of
Kiln: every field the issue names is there with its type, and the derived
ones follow from the others (tokens/s per GPU from the step time and the
batch, MFU from the model TFLOP/s and the peak, fits from the memory, the
exposed communication from its parts).

usage: check_perf_json.py JSON GLOBAL_BATCH SEQ GPUS PEAK_TFLOPS HBM_GIB"""
import json
import sys

out = json.load(open(sys.argv[1]))
batch, seq, gpus = (int(x) for x in sys.argv[2:5])
peak, hbm = float(sys.argv[5]), float(sys.argv[6])
for key in ("step_time_s", "tokens_per_s_per_gpu", "mfu", "peak_memory_gib",
            "exposed_comm_s", "compute_s", "launch_s", "model_tflops_per_gpu",
            "bubble"):
    assert isinstance(out[key], (int, float)), key
    assert out[key] >= 0, key
assert out["gpus"] == gpus
assert set(out["mesh"]) == {"pp", "dp_shard", "tp"}
assert out["mesh"]["pp"] * out["mesh"]["dp_shard"] * out["mesh"]["tp"] == gpus
tokens = batch * seq / out["step_time_s"] / gpus
assert abs(out["tokens_per_s_per_gpu"] / tokens - 1) < 1e-9
assert abs(out["mfu"] - out["model_tflops_per_gpu"] / peak) < 1e-9
assert out["fits"] == (out["peak_memory_gib"] <= hbm)
assert out["step_time_s"] >= out["compute_s"] + out["exposed_comm_s"] - 1e-12
# The exposed communication by the collective waited for: each part of
# the whole, and with one pp position (one plan) the whole.
waited = out["exposed_comm_by_collective_s"]
for what, s in waited.items():
    assert " over " in what and 0 < s <= out["exposed_comm_s"] + 1e-12, what
if out["mesh"]["pp"] == 1:
    total = sum(waited.values())
    assert abs(total - out["exposed_comm_s"]) <= 1e-9 * max(total, 1e-9)
kinds = out["compute_by_kind_s"]
assert abs(sum(kinds.values()) - out["compute_s"]) < 1e-9 * out["compute_s"]
assert 1 <= len(out["top_ops"]) <= 10
seconds = [op["seconds"] for op in out["top_ops"]]
assert seconds == sorted(seconds, reverse=True)
print("perf json: %d fields checked" % len(out))
