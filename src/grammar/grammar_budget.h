// Limits on one grammar, checked while it is compiled (not after), so a small request cannot
// make the compiler take the machine: a JSON schema whose anyOf over $ref doubles the work at
// each level, "a"{0,100000}, a 100,000-value enum. Every stage counts against the same budget:
// the GBNF text a schema or regex becomes, the grammar's positions once repetitions are
// unrolled, the parse stacks of a state, the trie walks of the first token mask, and the clock.
// Past a limit the compile throws GrammarLimitError naming it; a cancelled compile (its client
// left, the server is stopping) throws GrammarCancelled.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"

namespace pagoda {

struct GrammarLimits {
  // States: grammar positions (each byte set, rule reference and alternative end, repetitions
  // unrolled), and the parse stacks (and expansion steps) one state may take. The largest
  // schema of bench/grammar_corpus takes 10,815 states and 32 stacks (docs/BENCHMARKS.md).
  size_t max_states = 200'000;
  // The stacks one parse state may hold, found by the compile's probe of nested repetitions
  // (probe_states() in matcher.h), are max_states / kStatesPerStack: each distinct stack may
  // cost a walk of the vocabulary when masking (the corpus needs at most 32).
  static constexpr size_t kStatesPerStack = 200;
  // Wall-clock time of one compile, from the request's source to its first token mask (the
  // corpus compiles in at most 11 ms).
  double max_ms = 2'000;
  // Bytes of GBNF text a schema or regex may become, per state allowed.
  static constexpr size_t kTextBytesPerState = 16;
  size_t max_text_bytes() const { return max_states * kTextBytesPerState; }
  // Memory of the token-mask caches one compiled grammar keeps.
  size_t max_mask_bytes = size_t{32} << 20;
};

// A limit of GrammarLimits was reached; the message names it and the server flag that sets it.
class GrammarLimitError : public Error {
 public:
  explicit GrammarLimitError(const std::string& message) : Error(message) {}
};

// The compile was cancelled before it ended.
class GrammarCancelled : public Error {
 public:
  GrammarCancelled() : Error("grammar: the compilation was cancelled") {}
};

class GrammarBudget {
 public:
  explicit GrammarBudget(GrammarLimits limits = {}, const std::atomic<bool>* cancel = nullptr)
      : limits_(limits),
        cancel_(cancel),
        deadline_(std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double, std::milli>(limits.max_ms))) {}

  const GrammarLimits& limits() const { return limits_; }

  // `n` more grammar positions; throws past max_states.
  void add_states(size_t n) {
    states_ += n;
    if (states_ > limits_.max_states) {
      throw GrammarLimitError(
          str_cat("grammar: more than ", limits_.max_states, " states (--max-grammar-states)"));
    }
    tick();
  }
  // `n` more bytes of GBNF text made from a schema or regex; throws past max_text_bytes().
  void add_text(size_t n) {
    text_ += n;
    if (text_ > limits_.max_text_bytes()) {
      throw GrammarLimitError(
          str_cat("grammar: the GBNF text would exceed ", limits_.max_text_bytes(), " bytes (",
                  GrammarLimits::kTextBytesPerState, " per state of --max-grammar-states)"));
    }
    tick();
  }
  // A unit of work: every 256th call reads the clock and the cancel flag.
  void tick() {
    if ((++ticks_ & 255) == 0) check_now();
  }
  void check_now() const {
    if (cancel_ != nullptr && cancel_->load(std::memory_order_relaxed)) throw GrammarCancelled();
    if (std::chrono::steady_clock::now() > deadline_) {
      throw GrammarLimitError(str_cat("grammar: the compilation took more than ", limits_.max_ms,
                                      " ms (--max-grammar-ms)"));
    }
  }
  size_t states() const { return states_; }

 private:
  GrammarLimits limits_;
  const std::atomic<bool>* cancel_;
  std::chrono::steady_clock::time_point deadline_;
  size_t states_ = 0;
  size_t text_ = 0;
  uint64_t ticks_ = 0;
};

}  // namespace pagoda
