// SVG charts for benchmark reports: a line chart and a grouped bar chart, each a self-contained
// SVG 1.1 document (no scripts, generic font family) with round axis ticks and a legend.
// Non-finite values are never drawn, so no coordinate is ever NaN.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/report.h"
#include "core/markup.h"

namespace pagoda::bench {
namespace {

constexpr double kWidth = 800;
constexpr double kHeight = 450;
constexpr double kLeft = 80;    // room for y tick labels and the y label
constexpr double kRight = 190;  // room for the legend
constexpr double kTop = 50;     // room for the title
constexpr double kBottom = 70;  // room for x tick labels and the x label
constexpr double kPlotW = kWidth - kLeft - kRight;
constexpr double kPlotH = kHeight - kTop - kBottom;

const char* colour(size_t i) {
  static const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  return kPalette[i % (sizeof kPalette / sizeof kPalette[0])];
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// An axis range widened to round ticks: lo and hi are multiples of step.
struct Axis {
  double lo = 0;
  double hi = 1;
  double step = 0.2;
  double to_px(double v, double px_lo, double px_hi) const {
    return px_lo + (v - lo) / (hi - lo) * (px_hi - px_lo);
  }
};

// 1, 2 or 5 times a power of ten, the smallest such at least `raw`.
double round_step(double raw) {
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * power >= raw * (1 - 1e-9)) return m * power;
  }
  return 10 * power;
}

Axis make_axis(double lo, double hi, int target_ticks = 5) {
  if (!std::isfinite(lo) || !std::isfinite(hi) || lo > hi) {
    lo = 0;
    hi = 1;
  }
  if (hi == lo) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  Axis axis;
  axis.step = round_step((hi - lo) / target_ticks);
  axis.lo = std::floor(lo / axis.step + 1e-9) * axis.step;
  axis.hi = std::ceil(hi / axis.step - 1e-9) * axis.step;
  if (axis.hi <= axis.lo) axis.hi = axis.lo + axis.step;
  return axis;
}

// A tick label with as many decimals as the step needs; large values get k/M suffixes.
std::string tick_label(double v, double step) {
  char buf[32];
  const double mag = std::max(std::abs(v), step);
  if (mag >= 1e6 && step >= 1e5) {
    std::snprintf(buf, sizeof buf, "%gM", v / 1e6);
  } else if (mag >= 1e4 && step >= 1e3) {
    std::snprintf(buf, sizeof buf, "%gk", v / 1e3);
  } else {
    const int decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(step) - 1e-9)), 0, 9);
    std::snprintf(buf, sizeof buf, "%.*f", decimals, std::abs(v) < step * 1e-6 ? 0.0 : v);
  }
  return buf;
}

std::string text(double x, double y, const std::string& content, const std::string& attrs) {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\"" + (attrs.empty() ? "" : " " + attrs) +
         ">" + escape_markup(content) + "</text>\n";
}

std::string line(double x1, double y1, double x2, double y2, const std::string& attrs) {
  return "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" +
         num(y2) + "\" " + attrs + "/>\n";
}

std::string document_open(const std::string& title) {
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" + num(kWidth) +
         "\" height=\"" + num(kHeight) + "\" viewBox=\"0 0 " + num(kWidth) + " " + num(kHeight) +
         "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  out += "<title>" + escape_markup(title) + "</title>\n";
  out += "<rect x=\"0\" y=\"0\" width=\"" + num(kWidth) + "\" height=\"" + num(kHeight) +
         "\" fill=\"white\"/>\n";
  out +=
      text(kWidth / 2, 28, title, "text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\"");
  return out;
}

// Horizontal grid lines with y tick labels, the rotated y label, and the plot frame.
std::string y_axis(const Axis& y, const std::string& label) {
  std::string out;
  const int n = static_cast<int>(std::lround((y.hi - y.lo) / y.step));
  for (int i = 0; i <= n; ++i) {
    const double v = y.lo + i * y.step;
    const double py = y.to_px(v, kTop + kPlotH, kTop);
    out += line(kLeft, py, kLeft + kPlotW, py, "stroke=\"#dddddd\"");
    out += text(kLeft - 6, py + 4, tick_label(v, y.step), "text-anchor=\"end\"");
  }
  const double cy = kTop + kPlotH / 2;
  out += text(18, cy, label, "text-anchor=\"middle\" transform=\"rotate(-90 18 " + num(cy) + ")\"");
  out += "<rect x=\"" + num(kLeft) + "\" y=\"" + num(kTop) + "\" width=\"" + num(kPlotW) +
         "\" height=\"" + num(kPlotH) + "\" fill=\"none\" stroke=\"#333333\"/>\n";
  return out;
}

std::string x_ticks(const Axis& x, const std::string& label) {
  std::string out;
  const int n = static_cast<int>(std::lround((x.hi - x.lo) / x.step));
  const double base = kTop + kPlotH;
  for (int i = 0; i <= n; ++i) {
    const double v = x.lo + i * x.step;
    const double px = x.to_px(v, kLeft, kLeft + kPlotW);
    out += line(px, base, px, base + 5, "stroke=\"#333333\"");
    out += text(px, base + 18, tick_label(v, x.step), "text-anchor=\"middle\"");
  }
  out += text(kLeft + kPlotW / 2, kHeight - 20, label, "text-anchor=\"middle\"");
  return out;
}

std::string legend(const std::vector<Series>& series) {
  std::string out;
  const double x = kLeft + kPlotW + 16;
  for (size_t i = 0; i < series.size(); ++i) {
    const double y = kTop + 10 + 20 * static_cast<double>(i);
    out += "<rect x=\"" + num(x) + "\" y=\"" + num(y - 9) +
           "\" width=\"12\" height=\"12\" fill=\"" + colour(i) + "\"/>\n";
    out += text(x + 18, y + 1, series[i].name, "");
  }
  return out;
}

bool finite_point(const std::pair<double, double>& p) {
  return std::isfinite(p.first) && std::isfinite(p.second);
}

void extend(double& lo, double& hi, double v) {
  lo = std::min(lo, v);
  hi = std::max(hi, v);
}

// Runs of consecutive finite points: a non-finite point breaks the line.
std::vector<std::vector<std::pair<double, double>>> finite_runs(const Series& s) {
  std::vector<std::vector<std::pair<double, double>>> runs(1);
  for (const auto& p : s.points) {
    if (finite_point(p)) {
      runs.back().push_back(p);
    } else if (!runs.back().empty()) {
      runs.emplace_back();
    }
  }
  return runs;
}

std::string series_path(const Series& s, size_t index, const Axis& x, const Axis& y) {
  std::string out;
  for (const auto& run : finite_runs(s)) {
    if (run.empty()) continue;
    std::string points;
    for (const auto& [vx, vy] : run) {
      points += num(x.to_px(vx, kLeft, kLeft + kPlotW)) + "," +
                num(y.to_px(vy, kTop + kPlotH, kTop)) + " ";
    }
    points.pop_back();
    out += "<polyline points=\"" + points + "\" fill=\"none\" stroke=\"" + colour(index) +
           "\" stroke-width=\"2\"/>\n";
  }
  for (const auto& p : s.points) {
    if (!finite_point(p)) continue;
    out += "<circle cx=\"" + num(x.to_px(p.first, kLeft, kLeft + kPlotW)) + "\" cy=\"" +
           num(y.to_px(p.second, kTop + kPlotH, kTop)) + "\" r=\"3\" fill=\"" + colour(index) +
           "\"/>\n";
  }
  return out;
}

// The value of series `s` for category `c`, or NaN when missing.
double bar_value(const Series& s, size_t c) {
  return c < s.points.size() ? s.points[c].second : std::nan("");
}

// A bar from y0 to y1 (pixels) with its value written above it (below for negative values).
std::string bar(double x, double w, double y0, double y1, size_t index, double value) {
  const double top = std::min(y0, y1);
  std::string out = "<rect x=\"" + num(x) + "\" y=\"" + num(top) + "\" width=\"" + num(w) +
                    "\" height=\"" + num(std::abs(y1 - y0)) + "\" fill=\"" + colour(index) +
                    "\"><title>" + escape_markup(cell(value, 3)) + "</title></rect>\n";
  const double label_y = value >= 0 ? top - 4 : std::max(y0, y1) + 12;
  const int digits = std::abs(value) >= 100 ? 0 : std::abs(value) >= 10 ? 1 : 2;
  return out + text(x + w / 2, label_y, cell(value, digits),
                    "text-anchor=\"middle\" font-size=\"10\" fill=\"#333333\"");
}

}  // namespace

std::string svg_line_chart(const std::string& title, const std::string& x_label,
                           const std::string& y_label, const std::vector<Series>& series) {
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  for (const auto& s : series) {
    for (const auto& p : s.points) {
      if (!finite_point(p)) continue;
      extend(x_lo, x_hi, p.first);
      extend(y_lo, y_hi, p.second);
    }
  }
  if (y_lo > 0 && y_lo <= y_hi) y_lo = 0;  // start the value axis at zero when all positive
  const Axis x = make_axis(x_lo, x_hi, 8);
  const Axis y = make_axis(y_lo, y_hi);
  std::string out = document_open(title) + y_axis(y, y_label) + x_ticks(x, x_label);
  for (size_t i = 0; i < series.size(); ++i) out += series_path(series[i], i, x, y);
  return out + legend(series) + "</svg>\n";
}

std::string svg_bar_chart(const std::string& title, const std::string& y_label,
                          const std::vector<std::string>& categories,
                          const std::vector<Series>& series) {
  double lo = 0, hi = 0;
  for (const auto& s : series) {
    for (size_t c = 0; c < categories.size(); ++c) {
      const double v = bar_value(s, c);
      if (std::isfinite(v)) extend(lo, hi, v);
    }
  }
  if (lo == 0 && hi == 0) hi = 1;
  const Axis y = make_axis(lo, hi);
  std::string out = document_open(title) + y_axis(y, y_label);
  const double group_w = kPlotW / static_cast<double>(std::max<size_t>(categories.size(), 1));
  const double bar_w = group_w * 0.8 / static_cast<double>(std::max<size_t>(series.size(), 1));
  const double zero = y.to_px(0, kTop + kPlotH, kTop);
  for (size_t c = 0; c < categories.size(); ++c) {
    const double gx = kLeft + group_w * static_cast<double>(c);
    out += text(gx + group_w / 2, kTop + kPlotH + 18, categories[c], "text-anchor=\"middle\"");
    for (size_t i = 0; i < series.size(); ++i) {
      const double v = bar_value(series[i], c);
      if (!std::isfinite(v)) continue;
      const double bx = gx + group_w * 0.1 + bar_w * static_cast<double>(i);
      out += bar(bx, bar_w, zero, y.to_px(v, kTop + kPlotH, kTop), i, v);
    }
  }
  return out + legend(series) + "</svg>\n";
}

}  // namespace pagoda::bench
