// Benchmark report output: table alignment, CSV quoting, number cells, and SVG charts that are
// well-formed (balanced tags, no NaN coordinates) and name every series.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/report.h"
#include "core/error.h"
#include "test_util.h"

namespace pagoda::bench {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(Report, CellFormatsDigitsAndNaN) {
  EXPECT_EQ(cell(3.14159), "3.14");
  EXPECT_EQ(cell(3.14159, 0), "3");
  EXPECT_EQ(cell(2.5, 3), "2.500");
  EXPECT_EQ(cell(std::nan("")), "-");
  EXPECT_EQ(cell(-0.0001, 2), "0.00");
  EXPECT_EQ(cell(-1.5, 1), "-1.5");
  EXPECT_EQ(cell(INFINITY), "inf");
}

TEST(Report, TextAlignsNumbersRightAndTextLeft) {
  Table t{{"engine", "tok/s"}, {{"pagoda", "12.50"}, {"llama.cpp", "7.00"}, {"x", "-"}}};
  const auto lines = lines_of(t.to_text());
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0], "engine     tok/s");
  EXPECT_EQ(lines[1], "---------  -----");
  EXPECT_EQ(lines[2], "pagoda     12.50");
  EXPECT_EQ(lines[3], "llama.cpp   7.00");
  EXPECT_EQ(lines[4], "x              -");
}

TEST(Report, TextPadsShortRowsAndCountsUtf8AsOneColumn) {
  Table t{{"a", "b", "c"}, {{"é"}, {"xy", "1", "2"}}};
  const auto lines = lines_of(t.to_text());
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "a   b  c");
  EXPECT_EQ(lines[2], "é");  // trailing padding is trimmed
  EXPECT_EQ(lines[3], "xy  1  2");
}

TEST(Report, CsvQuotesOnlyWhenNeeded) {
  Table t{{"name", "value"},
          {{"plain", "1"}, {"a,b", "say \"hi\""}, {"two\nlines", ""}, {"short"}}};
  EXPECT_EQ(t.to_csv(),
            "name,value\r\n"
            "plain,1\r\n"
            "\"a,b\",\"say \"\"hi\"\"\"\r\n"
            "\"two\nlines\",\r\n"
            "short,\r\n");
}

// Counts opening and closing tags of the SVG, ignoring the XML declaration and self-closed ones;
// every element must close in the reverse order it opened.
bool tags_balanced(const std::string& svg) {
  std::vector<std::string> stack;
  size_t pos = 0;
  while ((pos = svg.find('<', pos)) != std::string::npos) {
    const size_t end = svg.find('>', pos);
    if (end == std::string::npos) return false;
    const std::string tag = svg.substr(pos + 1, end - pos - 1);
    pos = end + 1;
    if (tag.empty() || tag[0] == '?') continue;
    if (tag.back() == '/') continue;
    const std::string name = tag.substr(tag[0] == '/', tag.find_first_of(" \n") - (tag[0] == '/'));
    if (tag[0] != '/') {
      stack.push_back(name);
    } else if (stack.empty() || stack.back() != name) {
      return false;
    } else {
      stack.pop_back();
    }
  }
  return stack.empty();
}

void expect_well_formed(const std::string& svg) {
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_TRUE(tags_balanced(svg)) << svg;
  EXPECT_EQ(svg.find("nan"), std::string::npos) << svg;
  EXPECT_EQ(svg.find("inf"), std::string::npos) << svg;
  EXPECT_EQ(svg.find("<script"), std::string::npos);
}

TEST(Report, LineChartIsWellFormedAndNamesSeries) {
  std::vector<Series> series{
      {"batched", {{1, 10}, {2, 35.5}, {4, 80}, {8, std::nan("")}, {16, 150}}},
      {"seq <&>", {{1, 10}, {2, 11}, {4, 12}}}};
  const std::string svg = svg_line_chart("Throughput", "concurrency", "tokens/s", series);
  expect_well_formed(svg);
  EXPECT_NE(svg.find(">batched</text>"), std::string::npos);
  EXPECT_NE(svg.find(">seq &lt;&amp;&gt;</text>"), std::string::npos);
  EXPECT_NE(svg.find(">Throughput</text>"), std::string::npos);
  // Round ticks: 0 to 150 by 50 on y; x from 0 to 16 by 2.
  EXPECT_NE(svg.find(">50</text>"), std::string::npos);
  EXPECT_NE(svg.find(">150</text>"), std::string::npos);
  EXPECT_NE(svg.find(">16</text>"), std::string::npos);
  EXPECT_NE(svg.find(">0</text>"), std::string::npos);
  // The NaN point splits batched into two lines; seq is one.
  size_t polylines = 0;
  for (size_t p = 0; (p = svg.find("<polyline", p)) != std::string::npos; ++p) ++polylines;
  EXPECT_EQ(polylines, 3u);
}

TEST(Report, LineChartWithNoDataStillDrawsAxes) {
  const std::string svg = svg_line_chart("Empty", "x", "y", {{"none", {}}});
  expect_well_formed(svg);
  EXPECT_NE(svg.find(">none</text>"), std::string::npos);
}

TEST(Report, BarChartIsWellFormedAndSkipsMissingValues) {
  std::vector<Series> series{{"pagoda", {{0, 12.3}, {0, 45.6}, {0, std::nan("")}}},
                             {"llama.cpp", {{0, 0.02}}}};
  const std::string svg = svg_bar_chart("Latency", "ms", {"mean", "p90", "p99"}, series);
  expect_well_formed(svg);
  for (const char* name : {">pagoda</text>", ">llama.cpp</text>", ">mean</text>", ">p99</text>"}) {
    EXPECT_NE(svg.find(name), std::string::npos) << name;
  }
  size_t bars = 0;
  for (size_t p = 0; (p = svg.find("<rect", p)) != std::string::npos; ++p) ++bars;
  // Background, plot frame, 2 legend swatches, 3 bars (NaN and the missing values draw none).
  EXPECT_EQ(bars, 7u);
}

TEST(Report, WriteOutputWritesFileAndNamesBadPath) {
  const std::string path = test::temp_dir() + "/out.csv";
  write_output(path, "a,b\r\n");
  std::ifstream in(path, std::ios::binary);
  std::stringstream got;
  got << in.rdbuf();
  EXPECT_EQ(got.str(), "a,b\r\n");
  try {
    write_output("/nonexistent-dir/x.svg", "x");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x.svg"), std::string::npos);
  }
}

}  // namespace
}  // namespace pagoda::bench
