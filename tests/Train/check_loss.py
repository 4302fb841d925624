"""Asserts that a run's loss fell: reads metrics.jsonl, prints the first and
last losses, and exits 1 (with the reason) when a bound is not met."""
import argparse
import json
import sys

parser = argparse.ArgumentParser()
parser.add_argument("metrics")
parser.add_argument("--first-between", nargs=2, type=float, required=True)
parser.add_argument("--final-val-below", type=float, required=True)
parser.add_argument("--drop-at-least", type=float, required=True)
args = parser.parse_args()

train, valid = [], []
for line in open(args.metrics):
    record = json.loads(line)
    if "loss" in record:
        train.append(record["loss"])
    if "val_loss" in record:
        valid.append(record["val_loss"])
if not train or not valid:
    sys.exit("no training or validation losses in " + args.metrics)

# The last tenth of the steps, averaged: one batch is noisy.
tail = train[-max(1, len(train) // 10):]
final = sum(tail) / len(tail)
print("loss falls from %.4f to %.4f (validation %.4f)" % (train[0], final, valid[-1]))
low, high = args.first_between
failures = []
if not low <= train[0] <= high:
    failures.append("first loss %.4f outside [%g, %g]" % (train[0], low, high))
if valid[-1] >= args.final_val_below:
    failures.append("final validation loss %.4f not below %g" % (valid[-1], args.final_val_below))
if train[0] - final < args.drop_at_least:
    failures.append("loss fell by %.4f, less than %g" % (train[0] - final, args.drop_at_least))
if failures:
    sys.exit("; ".join(failures))
