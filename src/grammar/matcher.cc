#include "grammar/matcher.h"

#include <algorithm>

namespace pagoda {

void sort_unique(std::vector<GrammarStack>& stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
}

// Iterative: a branch waits in `work` rather than on the thread's stack, so a long chain of
// rules with alternatives cannot overflow it. `work` is the thread's, kept between calls (a
// trie walk expands once per node); this call uses what lies above `base`.
void expand_stack(const Grammar& g, GrammarStack stack, std::vector<GrammarStack>& out,
                  bool* emptied, ExpandBudget& budget) {
  thread_local std::vector<GrammarStack> work;
  const size_t base = work.size();
  // A limit error leaves this call's branches behind: drop them.
  struct Restore {
    size_t base;
    ~Restore() { work.resize(base); }
  } restore{base};
  for (bool first = true; first || work.size() > base; first = false) {
    if (!first) {
      stack = std::move(work.back());
      work.pop_back();
    }
    for (bool going = true; going;) {
      if (stack.empty()) {
        *emptied = true;
        break;
      }
      const uint32_t pos = stack.back();
      const GrammarElement& e = g.at(pos);
      switch (e.kind) {
        case GrammarElement::Kind::kEnd:
          stack.pop_back();  // the rule is done: go on where its caller goes on
          continue;
        case GrammarElement::Kind::kBytes:
          budget.spend();
          out.push_back(std::move(stack));
          going = false;
          break;
        case GrammarElement::Kind::kRule: {
          budget.spend();
          // The caller goes on after the reference; a reference that ends its alternative needs
          // no frame to come back to.
          if (g.at(pos + 1).kind == GrammarElement::Kind::kEnd) {
            stack.pop_back();
          } else {
            stack.back() = pos + 1;
          }
          const std::vector<uint32_t>& alts = g.alternatives(e.rule);
          for (size_t i = 0; i + 1 < alts.size(); ++i) {
            GrammarStack branch = stack;
            branch.push_back(alts[i]);
            work.push_back(std::move(branch));
          }
          stack.push_back(alts.back());
          continue;
        }
      }
    }
  }
}

GrammarState initial_state(const Grammar& g, GrammarBudget* budget) {
  GrammarState s;
  ExpandBudget steps(g, budget);
  for (uint32_t alt : g.alternatives(0)) expand_stack(g, {alt}, s.stacks, &s.complete, steps);
  sort_unique(s.stacks);
  return s;
}

void check_expansions(const Grammar& g, GrammarBudget* budget) {
  std::vector<GrammarStack> out;
  for (uint32_t pos = 0; pos < g.num_elements(); ++pos) {
    if (g.at(pos).kind != GrammarElement::Kind::kRule) continue;
    ExpandBudget steps(g, budget);
    bool emptied = false;
    out.clear();
    expand_stack(g, {pos}, out, &emptied, steps);
  }
}

GrammarState advance(const Grammar& g, const GrammarState& state, uint8_t byte) {
  GrammarState next;
  ExpandBudget steps(g);
  for (const GrammarStack& stack : state.stacks) {
    if (!g.at(stack.back()).bytes.test(byte)) continue;
    GrammarStack moved = stack;
    ++moved.back();
    expand_stack(g, std::move(moved), next.stacks, &next.complete, steps);
  }
  sort_unique(next.stacks);
  return next;
}

GrammarState advance(const Grammar& g, const GrammarState& state, std::string_view bytes) {
  GrammarState s = state;
  for (size_t i = 0; i < bytes.size(); ++i) {
    s = advance(g, s, static_cast<uint8_t>(bytes[i]));
    // Nothing can follow the end of the root rule.
    if (s.stacks.empty() && i + 1 < bytes.size()) return {};
  }
  return s;
}

}  // namespace pagoda
