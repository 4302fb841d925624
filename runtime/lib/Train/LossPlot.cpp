//===- LossPlot.cpp - The loss curve of a run as a PNG --------------------===//
//
// The script is piped to python3's stdin, so nothing has to be installed
// next to the binary; paths travel as arguments, never inside the script.
// The PNG is written to a temporary name and renamed, so a failed plot
// never leaves half a file.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Train/LossPlot.h"

#include <cstdio>
#include <fstream>
#include <sys/wait.h>
#include <unistd.h>

namespace kiln::runtime {

namespace {

constexpr const char *kPython = "/usr/bin/python3";

constexpr const char *kScript = R"py(
import json, os, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

metrics, png = sys.argv[1], sys.argv[2]
train, valid = ([], []), ([], [])
with open(metrics) as f:
    for line in f:
        record = json.loads(line)
        if "loss" in record:
            train[0].append(record["step"]); train[1].append(record["loss"])
        if "val_loss" in record:
            valid[0].append(record["step"]); valid[1].append(record["val_loss"])
if not train[0]:
    sys.exit("no training steps in " + metrics)
fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
ax.plot(*train, label="train", linewidth=1)
if valid[0]:
    ax.plot(*valid, "o-", label="validation", linewidth=1.5, markersize=4)
ax.set_xlabel("step")
ax.set_ylabel("cross-entropy loss (nats/token)")
ax.set_title(os.path.basename(os.path.dirname(os.path.abspath(metrics))))
ax.grid(True, alpha=0.3)
ax.legend()
fig.tight_layout()
tmp = png + ".tmp.png"
fig.savefig(tmp)
os.replace(tmp, png)
)py";

/// Single-quoted for /bin/sh.
std::string quoted(const std::string &s) {
  std::string out = "'";
  for (char c : s)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

} // namespace

Error plotLossCurve(const std::string &metricsPath,
                    const std::string &pngPath) {
  if (access(kPython, X_OK) != 0)
    return Error(std::string(kPython) +
                 " is not installed (Debian: python3-matplotlib)");
  std::string log = pngPath + ".log";
  std::string command = std::string(kPython) + " - " + quoted(metricsPath) +
                        " " + quoted(pngPath) + " >" + quoted(log) + " 2>&1";
  FILE *pipe = popen(command.c_str(), "w");
  if (!pipe)
    return Error(std::string("cannot start ") + kPython);
  std::fputs(kScript, pipe);
  int status = pclose(pipe);
  if (status == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    std::remove(log.c_str());
    return Error::success();
  }
  // The script's last line of output says why (e.g. no matplotlib).
  std::ifstream in(log);
  std::string line, last = "python3 failed";
  while (std::getline(in, line))
    if (!line.empty())
      last = line;
  std::remove(log.c_str());
  return Error(last);
}

} // namespace kiln::runtime
