#include "grammar/matcher.h"

#include <algorithm>

namespace pagoda {

void sort_unique(std::vector<GrammarStack>& stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
}

void expand_stack(const Grammar& g, GrammarStack stack, std::vector<GrammarStack>& out,
                  bool* emptied) {
  for (;;) {
    if (stack.empty()) {
      *emptied = true;
      return;
    }
    const uint32_t pos = stack.back();
    const GrammarElement& e = g.at(pos);
    switch (e.kind) {
      case GrammarElement::Kind::kEnd:
        stack.pop_back();  // the rule is done: go on where its caller goes on
        continue;
      case GrammarElement::Kind::kBytes:
        out.push_back(std::move(stack));
        return;
      case GrammarElement::Kind::kRule: {
        // The caller goes on after the reference; a reference that ends its alternative needs no
        // frame to come back to.
        if (g.at(pos + 1).kind == GrammarElement::Kind::kEnd) {
          stack.pop_back();
        } else {
          stack.back() = pos + 1;
        }
        const std::vector<uint32_t>& alts = g.alternatives(e.rule);
        for (size_t i = 0; i + 1 < alts.size(); ++i) {
          GrammarStack branch = stack;
          branch.push_back(alts[i]);
          expand_stack(g, std::move(branch), out, emptied);
        }
        stack.push_back(alts.back());
        continue;
      }
    }
  }
}

GrammarState initial_state(const Grammar& g) {
  GrammarState s;
  for (uint32_t alt : g.alternatives(0)) expand_stack(g, {alt}, s.stacks, &s.complete);
  sort_unique(s.stacks);
  return s;
}

GrammarState advance(const Grammar& g, const GrammarState& state, uint8_t byte) {
  GrammarState next;
  for (const GrammarStack& stack : state.stacks) {
    if (!g.at(stack.back()).bytes.test(byte)) continue;
    GrammarStack moved = stack;
    ++moved.back();
    expand_stack(g, std::move(moved), next.stacks, &next.complete);
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
