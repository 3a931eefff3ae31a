// Ctrl-C for benchmarks: SIGINT sets a flag the run loop checks between steps, so a benchmark
// stops, reports what it measured so far and exits kInterruptedExitCode. A second Ctrl-C ends
// the process at once.
#pragma once

#include <atomic>

namespace pagoda::bench {

inline constexpr int kInterruptedExitCode = 130;  // 128 + SIGINT, as shells report it

class SigintFlag {
 public:
  SigintFlag();   // clears the flag and installs the handler
  ~SigintFlag();  // restores the handler that was there before
  SigintFlag(const SigintFlag&) = delete;
  SigintFlag& operator=(const SigintFlag&) = delete;

  const std::atomic<bool>& flag() const;
  bool raised() const { return flag().load(); }

 private:
  void (*previous_)(int) = nullptr;
};

}  // namespace pagoda::bench
