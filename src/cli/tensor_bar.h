// The bar `pagoda quantize` and `pagoda convert` redraw on a terminal while they write a model:
// "<label> [#####.....] tensor 3/20, 1.2 MiB of 2.5 MiB", at most ten redraws a second, cleared
// when done (also when writing failed part way).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "cli/format_util.h"

namespace pagoda::cli {

class TensorBar {
 public:
  TensorBar(const char* label, bool quiet) : label_(label), shown_(!quiet && isatty(STDERR_FILENO) == 1) {}
  TensorBar(const TensorBar&) = delete;
  TensorBar& operator=(const TensorBar&) = delete;
  ~TensorBar() { clear(); }

  bool shown() const { return shown_; }

  // `force`: draw even within a tenth of a second of the last time (a tensor just finished).
  void draw(size_t tensor, size_t num_tensors, uint64_t bytes_done, uint64_t bytes_total, bool force) {
    if (!shown_) return;
    const auto now = std::chrono::steady_clock::now();
    if (!force && drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    drawn_ = true;
    constexpr int kWidth = 30;
    const int filled = bytes_total ? static_cast<int>(kWidth * static_cast<double>(bytes_done) /
                                                      static_cast<double>(bytes_total))
                                   : kWidth;
    std::fprintf(stderr, "\r\033[K%s [%s%s] tensor %zu/%zu, %s of %s", label_,
                 std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
                 tensor + 1, num_tensors, human_bytes(bytes_done).c_str(), human_bytes(bytes_total).c_str());
    std::fflush(stderr);
  }

  // Erases the bar's line, so a line printed next starts clean.
  void clear() {
    if (drawn_) std::fputs("\r\033[K", stderr);
  }

 private:
  const char* label_;
  bool shown_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace pagoda::cli
