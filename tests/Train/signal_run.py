"""Starts a training command, waits until its metrics file has LINES lines
(training is under way), sends one signal, and reports how the command
ended: "ended N s after SIG, exit code X". The command's own output passes
through. Fails if the command still runs LIMIT seconds after the signal
(then everything it started is killed).

  signal_run.py METRICS SIGNAL [--rank R] [--lines N] [--limit S] -- CMD...

SIGNAL is TERM, INT or STOP. Without --rank it goes to CMD itself (mpirun,
or kiln alone); with --rank to that rank of an mpirun, found among mpirun's
children by OMPI_COMM_WORLD_RANK."""
import argparse
import os
import signal
import subprocess
import sys
import time

split = sys.argv.index("--")
parser = argparse.ArgumentParser()
parser.add_argument("metrics")
parser.add_argument("signal", choices=["TERM", "INT", "STOP"])
parser.add_argument("--rank", type=int)
parser.add_argument("--lines", type=int, default=3)
parser.add_argument("--limit", type=float, default=30)
args = parser.parse_args(sys.argv[1:split])
command = sys.argv[split + 1:]


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def rank_of(pid):
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            for item in f.read().split(b"\0"):
                if item.startswith(b"OMPI_COMM_WORLD_RANK="):
                    return int(item.split(b"=", 1)[1])
    except OSError:
        pass
    return None


job = subprocess.Popen(command)
deadline = time.time() + 60
while time.time() < deadline and job.poll() is None:
    if os.path.exists(args.metrics) and \
            sum(1 for _ in open(args.metrics)) >= args.lines:
        break
    time.sleep(0.05)
else:
    job.kill()
    sys.exit("signal_run.py: training did not start")

target = job.pid
if args.rank is not None:
    ranks = [p for p in children(job.pid) if rank_of(p) == args.rank]
    if not ranks:
        job.kill()
        sys.exit("signal_run.py: no rank %d among mpirun's children" % args.rank)
    target = ranks[0]
ranks = children(job.pid)
os.kill(target, getattr(signal, "SIG" + args.signal))
sent = time.time()
try:
    code = job.wait(timeout=args.limit)
except subprocess.TimeoutExpired:
    for pid in ranks + [job.pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    job.wait()
    sys.exit("signal_run.py: the command still ran %d s after SIG%s"
             % (args.limit, args.signal))
sys.stdout.flush()
print("ended %d s after SIG%s, exit code %d"
      % (round(time.time() - sent), args.signal, code))
# Nothing the command started may outlive it (a stopped rank included).
time.sleep(0.5)
left = []
for pid in ranks:
    try:
        with open("/proc/%d/stat" % pid) as f:
            if f.read().split(")")[-1].split()[0] != "Z":
                left.append(pid)
    except OSError:
        pass
for pid in left:
    os.kill(pid, signal.SIGKILL)
if left:
    sys.exit("signal_run.py: processes %s outlived the command" % left)
