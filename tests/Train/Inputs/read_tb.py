# Reads a run's TensorBoard folder with tensorboard's own loader (the
# EventAccumulator TensorBoard's scalar dashboard uses, which checks every
# record's CRC) and compares each scalar with the same step's line of the
# run's metrics.jsonl; float32 in the events, so within 1e-6 relative.
#
#   read_tb.py TB_FOLDER METRICS_JSONL
import json
import sys

from tensorboard.backend.event_processing import event_accumulator

# TensorBoard tag (TorchTitan's names) -> metrics.jsonl field.
FIELDS = {
    "loss_metrics/global_avg_loss": "loss",
    "loss_metrics/val_loss": "val_loss",
    "lr": "lr",
    "grad_norm": "grad_norm",
    "throughput(tps)": "tokens_per_s_per_device",
    "tflops": "tflops",
    "mfu(%)": "mfu",
    "memory/max_reserved(GiB)": "peak_memory_gib",
}

folder, metrics_path = sys.argv[1], sys.argv[2]
acc = event_accumulator.EventAccumulator(
    folder, size_guidance={event_accumulator.SCALARS: 0})
acc.Reload()
tags = sorted(acc.Tags()["scalars"])
print("tags:", " ".join(tags))

lines = {}
for line in open(metrics_path):
    row = json.loads(line)
    lines.setdefault(row["step"], {}).update(row)

checked = 0
for tag in tags:
    field = FIELDS[tag]
    events = acc.Scalars(tag)
    for e in events:
        want = lines[e.step][field]
        if abs(e.value - want) > 1e-6 * max(abs(want), 1e-30):
            sys.exit("step %d %s: events %r, metrics.jsonl %r"
                     % (e.step, tag, e.value, want))
        checked += 1
    print("%s: %d steps" % (tag, len(events)))
print("checked %d values against metrics.jsonl" % checked)
