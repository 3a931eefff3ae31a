// A progress line on standard error for long benchmark runs: a redrawn bar when stderr is a
// terminal, otherwise a plain line every few seconds (so logs stay short). Nothing is printed
// for runs that end within the first seconds.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace pagoda::bench {

class Progress {
 public:
  // `total` units (tokens, runs) are expected; `unit` names them in the line.
  Progress(std::string label, int64_t total, std::string unit, bool enabled = true);
  ~Progress();  // finish()
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(int64_t done);
  // Ends the bar's line; idempotent.
  void finish();

  // "label [#####.....]  45%  1234/5000 tokens  12.3 s" for a bar `width` characters wide;
  // width 0 leaves the bar out.
  static std::string line(const std::string& label, int64_t done, int64_t total,
                          const std::string& unit, double elapsed_s, int width);

 private:
  using Clock = std::chrono::steady_clock;

  std::string label_;
  int64_t total_;
  std::string unit_;
  bool enabled_;
  bool tty_;
  bool drawn_ = false;
  Clock::time_point start_;
  Clock::time_point last_draw_;
};

}  // namespace pagoda::bench
