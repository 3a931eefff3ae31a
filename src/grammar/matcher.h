// Matching a Grammar byte by byte: a pushdown automaton whose state is a set of stacks of
// grammar positions (the top of each is the byte set to match next; below it, where each
// enclosing rule goes on), as llama.cpp's grammar engine keeps them. A rule reference at the
// end of an alternative replaces its frame instead of stacking on it, so repetitions written
// as right recursion (star ::= x star | ) run in constant stack depth.
//
// Invariants (check_invariants()): every stack is non-empty and its top is a kBytes position;
// the stacks are sorted and distinct.
//
// Work is bounded: making one state (the stacks it holds, and the rule expansions that led to
// them, duplicates included) takes at most grammar.max_stacks() steps, or GrammarLimitError.
// An ambiguous grammar, or 2^40 paths to the same stack, stops there instead of taking the
// machine.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace pagoda {

using GrammarStack = std::vector<uint32_t>;

// The state between bytes.
struct GrammarState {
  std::vector<GrammarStack> stacks;  // sorted, distinct
  bool complete = false;             // what was matched so far is a whole sentence of the root rule

  bool dead() const { return stacks.empty() && !complete; }
  bool operator==(const GrammarState&) const = default;
};

// Steps left for making one state; `budget` (optional) is ticked too, for its clock.
class ExpandBudget {
 public:
  explicit ExpandBudget(const Grammar& g, GrammarBudget* budget = nullptr)
      : left_(g.max_stacks()), max_(g.max_stacks()), budget_(budget) {}
  void spend() {
    if (left_ == 0) {
      throw GrammarLimitError(str_cat("grammar: a parse state needs more than ", max_,
                                      " stacks and expansions (--max-grammar-states)"));
    }
    --left_;
    if (budget_ != nullptr) budget_->tick();
  }

 private:
  size_t left_, max_;
  GrammarBudget* budget_;
};

// Expands `stack` (whose top may be a rule reference or the end of an alternative) into stacks
// whose tops are byte sets, appended to `out`; sets *emptied when a stack runs out (the
// outermost rule ended).
void expand_stack(const Grammar& g, GrammarStack stack, std::vector<GrammarStack>& out,
                  bool* emptied, ExpandBudget& budget);

// The state at the start of the root rule.
GrammarState initial_state(const Grammar& g, GrammarBudget* budget = nullptr);

// Expands every rule reference of `g` on its own, each within the stack limit, so a rule whose
// expansion explodes (anyOf over $refs doubling at each level) is refused when compiled even
// where the first state does not reach it (a tool's arguments, a nested property); then
// probe_states(). Throws GrammarLimitError, or the budget's own errors.
void check_expansions(const Grammar& g, GrammarBudget* budget);

// Walks the root and each rule of g.bounded_repetitions() on its own, byte after byte (at most
// kProbeBytes), each time taking the byte whose next state holds the most stacks: a repetition
// nested in another so that each byte may end either one (("a"{0,100} | "b"){0,100}) grows
// its states with every byte, to thousands of stacks that each cost a walk of the vocabulary
// when generating. A state past max_stacks() / GrammarLimits::kStatesPerStack stacks, and past
// the stacks the walk started with, is GrammarLimitError at compile time rather than a
// failure in the middle of a generation.
// A walk also ends after kProbeFlatBytes bytes that left no more stacks than it had seen.
constexpr int kProbeBytes = 512;
constexpr int kProbeFlatBytes = 32;
void probe_states(const Grammar& g, GrammarBudget* budget);

// The state after `byte`: each stack whose top matches it advances. Dead when none does.
// `budget` (optional) is ticked too, for its clock.
GrammarState advance(const Grammar& g, const GrammarState& state, uint8_t byte,
                     GrammarBudget* budget = nullptr);

// The state after every byte of `bytes`, or a dead state.
GrammarState advance(const Grammar& g, const GrammarState& state, std::string_view bytes);

void sort_unique(std::vector<GrammarStack>& stacks);

}  // namespace pagoda
