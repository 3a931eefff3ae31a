// Progress on standard error (see progress.h).
#include "bench/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

namespace pagoda::bench {
namespace {

constexpr double kFirstDrawS = 1.0;  // quiet for runs shorter than this
constexpr double kTtyPeriodS = 0.1;
constexpr double kLogPeriodS = 10.0;
constexpr int kBarWidth = 30;

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

Progress::Progress(std::string label, int64_t total, std::string unit, bool enabled)
    : label_(std::move(label)),
      total_(total),
      unit_(std::move(unit)),
      enabled_(enabled),
      tty_(isatty(STDERR_FILENO) == 1),
      start_(Clock::now()),
      last_draw_(start_) {}

Progress::~Progress() { finish(); }

std::string Progress::line(const std::string& label, int64_t done, int64_t total,
                           const std::string& unit, double elapsed_s, int width) {
  const double fraction =
      total > 0 ? std::clamp(static_cast<double>(done) / static_cast<double>(total), 0.0, 1.0) : 0;
  std::string out = label;
  if (width > 0) {
    const int filled = static_cast<int>(fraction * width);
    out += " [" + std::string(static_cast<size_t>(filled), '#') +
           std::string(static_cast<size_t>(width - filled), '.') + "]";
  }
  char buf[128];
  std::snprintf(buf, sizeof buf, " %3d%%  %lld/%lld %s  %.1f s", static_cast<int>(fraction * 100),
                static_cast<long long>(done), static_cast<long long>(total), unit.c_str(),
                elapsed_s);
  return out + buf;
}

void Progress::update(int64_t done) {
  if (!enabled_) return;
  const Clock::time_point now = Clock::now();
  const double elapsed = seconds(now - start_);
  if (elapsed < kFirstDrawS) return;
  if (drawn_ && seconds(now - last_draw_) < (tty_ ? kTtyPeriodS : kLogPeriodS)) return;
  last_draw_ = now;
  drawn_ = true;
  const std::string text = line(label_, done, total_, unit_, elapsed, tty_ ? kBarWidth : 0);
  std::fprintf(stderr, tty_ ? "\r%s\033[K" : "%s\n", text.c_str());
  std::fflush(stderr);
}

void Progress::finish() {
  if (enabled_ && drawn_ && tty_) std::fputs("\n", stderr);
  enabled_ = false;
}

}  // namespace pagoda::bench
