"""Starts an mpirun of kiln-run, kills one rank with SIGKILL once training
is under way, and reports how long the other ranks took to end (they must
not hang): "ended N s after the kill, exit code X". Fails if the job is
still running 30 s after the kill.

  kill_rank.py MPIRUN_PREFIX... -- KILN_RUN PLAN OUT"""
import os
import signal
import subprocess
import sys
import time

split = sys.argv.index("--")
mpirun, (kiln_run, plan, out) = sys.argv[1:split], sys.argv[split + 1:]
job = subprocess.Popen(mpirun + [kiln_run, plan, "--steps", "1000000",
                                 "--threads", "1", "--out", out],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
metrics = os.path.join(out, "metrics.jsonl")
deadline = time.time() + 60
while time.time() < deadline:
    if os.path.exists(metrics) and sum(1 for _ in open(metrics)) >= 3:
        break
    time.sleep(0.2)
else:
    job.kill()
    sys.exit("training did not start")
ranks = subprocess.run(["pgrep", "-f", plan], capture_output=True,
                       text=True).stdout.split()
ranks = [int(p) for p in ranks if int(p) != job.pid]
victim = max(ranks)  # a rank, not the mpirun
os.kill(victim, signal.SIGKILL)
killed = time.time()
try:
    code = job.wait(timeout=30)
except subprocess.TimeoutExpired:
    job.kill()
    sys.exit("the job still ran 30 s after one rank was killed")
print("ended %d s after the kill, exit code %s"
      % (round(time.time() - killed), "non-zero" if code else "0"))
