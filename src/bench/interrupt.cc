// SIGINT as a flag (see interrupt.h).
#include "bench/interrupt.h"

#include <csignal>
#include <cstdlib>

namespace pagoda::bench {
namespace {

std::atomic<bool> g_sigint{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler needs a lock-free flag");

void on_sigint(int) {
  if (g_sigint.exchange(true)) std::_Exit(kInterruptedExitCode);
}

}  // namespace

SigintFlag::SigintFlag() {
  g_sigint = false;
  previous_ = std::signal(SIGINT, on_sigint);
}

SigintFlag::~SigintFlag() { std::signal(SIGINT, previous_ == SIG_ERR ? SIG_DFL : previous_); }

const std::atomic<bool>& SigintFlag::flag() const { return g_sigint; }

}  // namespace pagoda::bench
