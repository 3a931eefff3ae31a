#include "grammar/matcher.h"

#include <algorithm>
#include <map>

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
  probe_states(g, budget);
}

namespace {

// One byte of each class of bytes that the same tops of `stacks` accept (bytes of a class
// lead to the same state).
std::vector<uint8_t> distinct_bytes(const Grammar& g, const std::vector<GrammarStack>& stacks) {
  std::vector<uint32_t> tops;
  for (const GrammarStack& s : stacks) tops.push_back(s.back());
  std::sort(tops.begin(), tops.end());
  tops.erase(std::unique(tops.begin(), tops.end()), tops.end());
  std::map<std::vector<bool>, uint8_t> classes;
  for (int b = 255; b >= 0; --b) {
    std::vector<bool> accepting(tops.size());
    bool any = false;
    for (size_t i = 0; i < tops.size(); ++i) {
      accepting[i] = g.at(tops[i]).bytes.test(static_cast<size_t>(b));
      any = any || accepting[i];
    }
    if (any) classes[accepting] = static_cast<uint8_t>(b);  // the lowest byte of its class
  }
  std::vector<uint8_t> out;
  for (const auto& [accepting, b] : classes) out.push_back(b);
  std::sort(out.begin(), out.end());
  return out;
}

void probe_from(const Grammar& g, uint32_t rule, size_t limit, GrammarBudget* budget) {
  GrammarState s;
  ExpandBudget steps(g, budget);
  for (uint32_t alt : g.alternatives(rule)) expand_stack(g, {alt}, s.stacks, &s.complete, steps);
  sort_unique(s.stacks);
  // What a state grows to, not how wide the rule starts (a 5,000-value enum starts with
  // 5,000 stacks and only narrows).
  limit = std::max(limit, s.stacks.size());
  size_t widest = s.stacks.size();
  for (int i = 0, flat = 0; i < kProbeBytes && !s.stacks.empty() && flat < kProbeFlatBytes; ++i) {
    GrammarState most;
    for (uint8_t b : distinct_bytes(g, s.stacks)) {
      GrammarState next = advance(g, s, b, budget);
      if (next.stacks.size() > most.stacks.size()) most = std::move(next);
    }
    if (most.stacks.size() > limit) {
      throw GrammarLimitError(str_cat("grammar: a parse state would hold more than ", limit,
                                      " stacks (--max-grammar-states / ",
                                      GrammarLimits::kStatesPerStack,
                                      "): a repetition nested in another, each byte may end "
                                      "either (rule '",
                                      g.rule_name(rule), "')"));
    }
    if (most.stacks == s.stacks) break;  // a loop: nothing more to find here
    flat = most.stacks.size() > widest ? 0 : flat + 1;
    widest = std::max(widest, most.stacks.size());
    s = std::move(most);
  }
}

}  // namespace

void probe_states(const Grammar& g, GrammarBudget* budget) {
  const size_t limit = std::max<size_t>(1, g.max_stacks() / GrammarLimits::kStatesPerStack);
  probe_from(g, 0, limit, budget);  // the root: repetitions written out as rules
  for (uint32_t rule : g.bounded_repetitions()) probe_from(g, rule, limit, budget);
}

GrammarState advance(const Grammar& g, const GrammarState& state, uint8_t byte,
                     GrammarBudget* budget) {
  GrammarState next;
  ExpandBudget steps(g, budget);
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
