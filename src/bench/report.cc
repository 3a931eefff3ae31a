// Benchmark report tables (aligned text and RFC 4180 CSV), number cells, and writing a report to
// a path or standard output. The SVG charts are in report_svg.cc.
#include "bench/report.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>

#include "core/error.h"

namespace pagoda::bench {
namespace {

// Display width of UTF-8 text: one column per code point (continuation bytes are not counted).
size_t display_width(const std::string& text) {
  size_t width = 0;
  for (unsigned char c : text) width += (c & 0xC0) != 0x80;
  return width;
}

// A cell that reads as a number ("12", "-3.5", "1e9", "42%", "1.5x") or as no data ("-").
bool is_numeric(const std::string& text) {
  if (text == "-") return true;
  size_t end = text.size();
  if (end > 0 && (text[end - 1] == '%' || text[end - 1] == 'x')) --end;
  if (end == 0) return false;
  const std::string body = text.substr(0, end);
  char* parse_end = nullptr;
  std::strtod(body.c_str(), &parse_end);
  return parse_end == body.c_str() + body.size() &&
         !std::isspace(static_cast<unsigned char>(body[0]));
}

const std::string& cell_at(const std::vector<std::string>& row, size_t column) {
  static const std::string kEmpty;
  return column < row.size() ? row[column] : kEmpty;
}

// A column is right-aligned when it has at least one cell and every non-empty cell is numeric.
bool column_is_numeric(const Table& table, size_t column) {
  bool any = false;
  for (const auto& row : table.rows) {
    const std::string& text = cell_at(row, column);
    if (text.empty()) continue;
    if (!is_numeric(text)) return false;
    any = true;
  }
  return any;
}

size_t column_width(const Table& table, size_t column) {
  size_t width = display_width(cell_at(table.columns, column));
  for (const auto& row : table.rows) width = std::max(width, display_width(cell_at(row, column)));
  return width;
}

void append_padded(std::string& out, const std::string& text, size_t width, bool right) {
  const std::string padding(width - display_width(text), ' ');
  out += right ? padding + text : text + padding;
}

std::string text_line(const std::vector<std::string>& row, const std::vector<size_t>& widths,
                      const std::vector<bool>& right) {
  std::string line;
  for (size_t c = 0; c < widths.size(); ++c) {
    if (c > 0) line += "  ";
    append_padded(line, cell_at(row, c), widths[c], right[c]);
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return line + "\n";
}

std::string csv_cell(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

std::string csv_line(const std::vector<std::string>& row, size_t num_columns) {
  std::string line;
  for (size_t c = 0; c < num_columns; ++c) {
    if (c > 0) line += ',';
    line += csv_cell(cell_at(row, c));
  }
  return line + "\r\n";
}

}  // namespace

std::string Table::to_text() const {
  const size_t n = columns.size();
  std::vector<size_t> widths(n);
  std::vector<bool> right(n);
  for (size_t c = 0; c < n; ++c) {
    widths[c] = column_width(*this, c);
    right[c] = column_is_numeric(*this, c);
  }
  std::string out = text_line(columns, widths, right);
  std::vector<std::string> rule(n);
  for (size_t c = 0; c < n; ++c) rule[c] = std::string(widths[c], '-');
  out += text_line(rule, widths, right);
  for (const auto& row : rows) out += text_line(row, widths, right);
  return out;
}

std::string Table::to_csv() const {
  std::string out = csv_line(columns, columns.size());
  for (const auto& row : rows) out += csv_line(row, columns.size());
  return out;
}

std::string cell(double value, int digits) {
  if (std::isnan(value)) return "-";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", std::clamp(digits, 0, 17), value);
  // "-0.00" reads as a sign error; print zero plainly.
  if (buf[0] == '-' && std::strspn(buf + 1, "0.") == std::strlen(buf + 1)) return buf + 1;
  return buf;
}

void write_output(const std::string& path, const std::string& content) {
  if (path == "-") {
    std::cout << content;
    std::cout.flush();
    if (!std::cout) fail("cannot write to standard output");
    return;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail("cannot open ", path, " for writing: ", std::strerror(errno));
  out << content;
  out.flush();
  if (!out) fail("cannot write ", path, ": ", std::strerror(errno));
}

}  // namespace pagoda::bench
