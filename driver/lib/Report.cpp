//===- Report.cpp - `kiln report RUN`: one self-contained HTML page -------===//
//
// The run's metrics.jsonl as plots (loss and validation loss, learning
// rate, gradient norm, throughput with TFLOP/s and MFU when recorded) and a
// summary, with the model file the run trained (its config.toml). Plots are
// inline SVG drawn here; the page loads nothing and runs no script, so it
// can be mailed or attached as it is.
//
//===----------------------------------------------------------------------===//

#include "kiln/Driver/Driver.h"
#include "kiln/Driver/Session.h"
#include "kiln/Runtime/Support/AtomicFile.h"
#include "kiln/Runtime/Support/Files.h"
#include "kiln/Runtime/Train/Checkpoint.h"
#include "kiln/Runtime/Train/Trainer.h"

#include <nlohmann/json.hpp>

#include "llvm/Support/FileSystem.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <sstream>

using namespace kiln;
using namespace kiln::runtime;

namespace {
constexpr int64_t kMaxMetricsBytes = int64_t(1) << 30;

struct Point {
  double x, y;
};
struct Series {
  std::string name, color;
  std::vector<Point> points;
  bool dots = false; // sparse series (validation): marks at each point
};

/// Every numeric field of every line, by field name, as (step, value).
using Columns = std::map<std::string, std::vector<Point>>;

std::string escape(const std::string &text) {
  std::string out;
  for (char c : text) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

std::string number(double v, int digits = 4) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*g", digits, v);
  return text;
}

/// About five round tick values covering [lo, hi].
std::vector<double> ticks(double lo, double hi) {
  double span = hi - lo;
  double step = std::pow(10, std::floor(std::log10(span / 5)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (span / (step * m) <= 6) {
      step *= m;
      break;
    }
  std::vector<double> out;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step)
    out.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
  return out;
}

/// One plot: `series` against the step, as an inline SVG.
std::string plot(const std::string &title, const std::vector<Series> &series) {
  constexpr double W = 560, H = 300, L = 64, R = 16, T = 34, B = 40;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const Series &s : series)
    for (const Point &p : s.points) {
      x0 = std::min(x0, p.x);
      x1 = std::max(x1, p.x);
      y0 = std::min(y0, p.y);
      y1 = std::max(y1, p.y);
    }
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W
      << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << " " << H
      << "\" role=\"img\" aria-label=\"" << escape(title) << "\">\n"
      << "<text x=\"" << L << "\" y=\"20\" class=\"title\">" << escape(title)
      << "</text>\n";
  if (!(x0 <= x1)) {
    svg << "<text x=\"" << L << "\" y=\"" << H / 2
        << "\">no values recorded</text>\n</svg>\n";
    return svg.str();
  }
  if (x1 == x0)
    x1 = x0 + 1;
  if (y1 == y0) {
    double pad = y0 == 0 ? 1 : std::abs(y0) * 0.05;
    y0 -= pad;
    y1 += pad;
  }
  auto sx = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto sy = [&](double y) {
    return H - B - (y - y0) / (y1 - y0) * (H - T - B);
  };
  svg << "<rect x=\"" << L << "\" y=\"" << T << "\" width=\"" << W - L - R
      << "\" height=\"" << H - T - B << "\" class=\"frame\"/>\n";
  for (double t : ticks(y0, y1))
    svg << "<line x1=\"" << L << "\" x2=\"" << W - R << "\" y1=\"" << sy(t)
        << "\" y2=\"" << sy(t) << "\" class=\"grid\"/><text x=\"" << L - 6
        << "\" y=\"" << sy(t) + 4 << "\" class=\"ytick\">" << number(t, 3)
        << "</text>\n";
  for (double t : ticks(x0, x1))
    svg << "<text x=\"" << sx(t) << "\" y=\"" << H - B + 16
        << "\" class=\"xtick\">" << number(t, 6) << "</text>\n";
  svg << "<text x=\"" << (L + W - R) / 2 << "\" y=\"" << H - 6
      << "\" class=\"xtick\">step</text>\n";
  double legendX = W - R - 8;
  for (auto s = series.rbegin(); s != series.rend(); ++s) {
    if (s->points.empty())
      continue;
    svg << "<polyline fill=\"none\" stroke=\"" << s->color
        << "\" stroke-width=\"1.8\" points=\"";
    for (const Point &p : s->points)
      svg << sx(p.x) << "," << sy(p.y) << " ";
    svg << "\"/>\n";
    if (s->dots)
      for (const Point &p : s->points)
        svg << "<circle cx=\"" << sx(p.x) << "\" cy=\"" << sy(p.y)
            << "\" r=\"3\" fill=\"" << s->color << "\"/>\n";
    svg << "<text x=\"" << legendX << "\" y=\"" << T - 8
        << "\" class=\"legend\" fill=\"" << s->color << "\">" << escape(s->name)
        << "</text>\n";
    legendX -= 10 + 7.5 * static_cast<double>(s->name.size());
  }
  svg << "</svg>\n";
  return svg.str();
}

/// The median of the values after the first (the first step includes
/// warm-up: allocation, kernel compilation, CUDA graph capture).
std::optional<double> steadyMedian(const std::vector<Point> &points) {
  if (points.size() < 2)
    return points.empty() ? std::nullopt : std::optional<double>(points[0].y);
  std::vector<double> v;
  for (size_t i = 1; i < points.size(); ++i)
    v.push_back(points[i].y);
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

Error readMetrics(const std::string &path, Columns &columns) {
  Expected<std::string> text =
      readRegularFile(path, kMaxMetricsBytes, "metrics file");
  if (!text)
    return Error(text.error().message() +
                 " (kiln report reads a kiln train output folder)");
  std::istringstream lines(*text);
  std::string line;
  for (int64_t n = 1; std::getline(lines, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
    auto step = row.is_object() ? row.find("step") : row.end();
    if (row.is_discarded() || !row.is_object() || step == row.end() ||
        !step->is_number())
      return Error(path + ":" + std::to_string(n) +
                   ":1: error: not a metrics line (a JSON object with a "
                   "numeric \"step\")");
    double x = step->get<double>();
    for (auto it = row.begin(); it != row.end(); ++it)
      if (it.key() != "step" && it->is_number()) {
        double y = it->get<double>();
        if (std::isfinite(y))
          columns[it.key()].push_back({x, y});
      }
  }
  if (columns.empty())
    return Error(path + " holds no metrics");
  return Error::success();
}

/// The model the run trained: its config.toml, else its latest
/// checkpoint's.
std::string modelFileOf(const std::string &run) {
  std::string path = run + "/config.toml";
  if (!llvm::sys::fs::exists(path)) {
    Expected<std::string> dir =
        findCheckpoint(run, "checkpoints", {"config.toml"});
    if (!dir)
      return "";
    path = *dir + "/config.toml";
  }
  Expected<std::string> text =
      readRegularFile(path, int64_t(1) << 20, "config");
  return text ? *text : "";
}

const char *kStyle =
    R"(body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1180px}
h1{font-size:20px;margin:0 0 4px}.sub{color:#666;margin-bottom:16px}
.plots{display:flex;flex-wrap:wrap;gap:12px}
svg{background:#fff;border:1px solid #ddd}
.title{font-weight:600;font-size:14px}.frame{fill:none;stroke:#999}
.grid{stroke:#eee}.ytick{font-size:11px;text-anchor:end;fill:#555}
.xtick{font-size:11px;text-anchor:middle;fill:#555}
.legend{font-size:12px;text-anchor:end}
table{border-collapse:collapse;margin:12px 0}td,th{padding:3px 12px;border-bottom:1px solid #eee;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}
pre{background:#f6f6f6;padding:12px;overflow:auto;font-size:12px})";
} // namespace

int kiln::runReport(const ReportCommand &command) {
  std::string run = command.run;
  while (run.size() > 1 && run.back() == '/')
    run.pop_back();
  Columns columns;
  if (Error failure = readMetrics(run + "/metrics.jsonl", columns))
    return commandError(failure.message());
  auto column = [&](const char *name) -> const std::vector<Point> & {
    static const std::vector<Point> none;
    auto found = columns.find(name);
    return found == columns.end() ? none : found->second;
  };

  std::ostringstream summary;
  auto row = [&](const std::string &name, const std::string &value) {
    summary << "<tr><th>" << escape(name) << "</th><td class=\"n\">"
            << escape(value) << "</td></tr>\n";
  };
  const std::vector<Point> &loss = column("loss");
  if (!loss.empty()) {
    row("steps", number(loss.front().x, 9) + " to " + number(loss.back().x, 9));
    row("loss, first and last",
        number(loss.front().y) + " \u2192 " + number(loss.back().y));
  }
  const std::vector<Point> &valid = column("val_loss");
  if (!valid.empty()) {
    auto best = std::min_element(valid.begin(), valid.end(),
                                 [](Point a, Point b) { return a.y < b.y; });
    row("best validation loss",
        number(best->y) + " (step " + number(best->x, 9) + ")");
  }
  struct Median {
    const char *field, *label;
    int digits;
  };
  for (Median m :
       {Median{"tokens_per_s", "tokens/s, all devices (median)", 5},
        Median{"tokens_per_s_per_device", "tokens/s a device (median)", 5},
        Median{"tflops", "model TFLOP/s a device (median)", 4},
        Median{"mfu", "MFU % (median)", 3}})
    if (std::optional<double> v = steadyMedian(column(m.field)))
      row(m.label, number(*v, m.digits));
  if (const std::vector<Point> &memory = column("peak_memory_gib");
      !memory.empty())
    row("peak memory (GiB)", number(memory.back().y, 4));

  std::ostringstream plots;
  plots << plot("loss", {{"train", "#1f77b4", loss, false},
                         {"validation", "#d62728", valid, true}});
  plots << plot("learning rate", {{"lr", "#2ca02c", column("lr"), false}});
  plots << plot("gradient norm",
                {{"grad norm", "#9467bd", column("grad_norm"), false}});
  const std::vector<Point> &perDevice = column("tokens_per_s_per_device");
  plots << plot(
      "throughput (tokens/s a device)",
      {{"tokens/s", "#ff7f0e",
        perDevice.empty() ? column("tokens_per_s") : perDevice, false}});
  if (!column("mfu").empty())
    plots << plot("MFU (%)", {{"MFU", "#8c564b", column("mfu"), false}});
  else if (!column("tflops").empty())
    plots << plot("model TFLOP/s a device",
                  {{"TFLOP/s", "#8c564b", column("tflops"), false}});

  std::string config = modelFileOf(run);
  char when[64];
  std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::ostringstream page;
  page << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta "
          "charset=\"utf-8\">\n"
       << "<title>Kiln run " << escape(run) << "</title>\n<style>" << kStyle
       << "</style>\n</head>\n<body>\n<h1>Kiln run " << escape(run)
       << "</h1>\n<div class=\"sub\">" << escape(run)
       << "/metrics.jsonl, reported " << when << " by kiln " << KILN_GIT_HASH
       << "</div>\n<table>\n"
       << summary.str() << "</table>\n<div class=\"plots\">\n"
       << plots.str() << "</div>\n<h2>Model file</h2>\n<pre>"
       << (config.empty() ? std::string("(not recorded: no config.toml in the "
                                        "run or its checkpoints)")
                          : escape(config))
       << "</pre>\n</body>\n</html>\n";

  std::string out = command.out.empty() ? run + "/report.html" : command.out;
  std::string html = page.str();
  AtomicFile file(out);
  Error failure = file.write([&](std::FILE *f) {
    return std::fwrite(html.data(), 1, html.size(), f) == html.size();
  });
  if (!failure)
    failure = file.commit();
  if (failure)
    return commandError(failure.message());
  std::printf("report: %s (%zu bytes)\n", out.c_str(), html.size());
  return 0;
}
