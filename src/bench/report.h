// Benchmark reports: a table for the terminal and CSV, SVG charts, and writing any of them to a
// path ("-" = standard output). Every bench subcommand builds its report from these.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace pagoda::bench {

// A table of text cells. Rows shorter than `columns` are padded with empty cells.
struct Table {
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;

  // Aligned columns for the terminal: text left, numbers right, a rule under the header.
  std::string to_text() const;
  // RFC 4180: cells holding a comma, quote or line break are quoted, quotes doubled.
  std::string to_csv() const;
};

// A number as a table cell: `digits` after the point; NaN (no data) becomes "-".
std::string cell(double value, int digits = 2);

// One line of a line chart, or one group's values in a bar chart.
struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y); bar charts use y only, x ignored
};

// A line chart of y against x, one coloured line with markers per series, a legend and axes
// with round ticks. Self-contained SVG 1.1 (no scripts, no external fonts).
std::string svg_line_chart(const std::string& title, const std::string& x_label,
                           const std::string& y_label, const std::vector<Series>& series);

// Grouped bars: one group per category, one bar per series within it (series[i].points[j].second
// is series i's value for category j; missing values draw no bar).
std::string svg_bar_chart(const std::string& title, const std::string& y_label,
                          const std::vector<std::string>& categories,
                          const std::vector<Series>& series);

// Writes `content` to `path`, or to standard output when path is "-". Throws Error naming the
// path when it cannot be written.
void write_output(const std::string& path, const std::string& content);

}  // namespace pagoda::bench
