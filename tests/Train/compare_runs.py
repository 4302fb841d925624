"""Compares two Kiln training runs, read independently of Kiln: the loss of
every step the first logged (in metrics.jsonl; the reference must have
logged it too) and every tensor of one checkpoint's model.safetensors.
Prints the largest relative differences, and fails when they exceed
--loss-bound or --weight-bound (a weight's difference is norm-wise,
||a - b|| / ||b||)."""
import argparse
import json
import math
import struct
import sys


def losses(run):
    out = {}
    for line in open(run + "/metrics.jsonl"):
        m = json.loads(line)
        if "loss" in m:
            out[m["step"]] = m["loss"]
    return out


def tensors(path):
    data = open(path, "rb").read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", name
        begin, end = t["data_offsets"]
        raw = data[8 + length + begin:8 + length + end]
        out[name] = struct.unpack("<%df" % (len(raw) // 4), raw)
    return out


parser = argparse.ArgumentParser()
parser.add_argument("run")
parser.add_argument("reference")
parser.add_argument("--checkpoint", required=True)
parser.add_argument("--loss-bound", type=float, required=True)
parser.add_argument("--weight-bound", type=float, required=True)
parser.add_argument("--file", default="model.safetensors",
                    help="the checkpoint file to compare")
parser.add_argument("--prefix", default="",
                    help="compare only the tensors whose name starts so")
args = parser.parse_args()

a, b = losses(args.run), losses(args.reference)
if not a or any(s not in b for s in a):
    sys.exit("the run logged steps the reference did not")
loss = max(abs(a[s] - b[s]) / abs(b[s]) for s in a)
wa = tensors(args.run + "/checkpoints/" + args.checkpoint + "/" + args.file)
wb = tensors(args.reference + "/checkpoints/" + args.checkpoint + "/" + args.file)
wa = {k: v for k, v in wa.items() if k.startswith(args.prefix)}
wb = {k: v for k, v in wb.items() if k.startswith(args.prefix)}
if sorted(wa) != sorted(wb):
    sys.exit("the checkpoints hold different tensors")
weight = 0.0
for name in wb:
    diff = math.sqrt(sum((x - y) ** 2 for x, y in zip(wa[name], wb[name])))
    norm = math.sqrt(sum(y * y for y in wb[name]))
    weight = max(weight, diff / norm)
print("%d steps, %d tensors: loss %.2e, weights %.2e"
      % (len(a), len(wb), loss, weight))
if loss > args.loss_bound or weight > args.weight_bound:
    sys.exit("differ beyond the bounds (loss %g, weights %g)"
             % (args.loss_bound, args.weight_bound))
