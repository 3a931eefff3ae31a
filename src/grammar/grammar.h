// A context-free grammar over bytes, the form every constraint compiles to: GBNF text
// (llama.cpp's grammar format), a regular expression, a JSON schema or "any JSON object". Every
// terminal is a set of bytes, so a code-point class becomes alternatives of UTF-8 byte
// sequences and a token that holds part of a character is matched byte by byte like any other.
//
// Layout: all alternatives of all rules live in one array of elements; an alternative is a run
// of elements closed by an End element; a position in the grammar is an index into that array.
// Rule 0 is the root.
//
// Invariants (check()): every alternative ends with kEnd; every rule has at least one
// alternative; every reference names a rule; no rule can reach itself without consuming a byte
// (left recursion would expand forever), which compile() refuses. A repetition X* or X{m,n}
// whose X can match nothing, as in (a*)* or ("" | "a")*, is not left recursion: compile()
// repeats X without its empty match instead (the same strings, without a chain of empty
// matches to expand at every byte).
//
// Building counts against a GrammarBudget (set_budget): each position, alternative and rule.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar_budget.h"

namespace pagoda {

using ByteSet = std::bitset<256>;

struct GrammarElement {
  enum class Kind : uint8_t { kEnd, kBytes, kRule };
  Kind kind = Kind::kEnd;
  uint32_t rule = 0;  // kRule: the rule referenced
  ByteSet bytes;      // kBytes: the bytes that match
};

class Grammar {
 public:
  // Rules by name are created on first mention; add_alternative() fills them.
  uint32_t rule(const std::string& name);
  // A fresh rule with a name derived from `hint` (helper rules of repetitions and classes).
  uint32_t new_rule(const std::string& hint);
  void add_alternative(uint32_t rule, const std::vector<GrammarElement>& elements);
  // A fresh rule matching `item` repeated any number of times: star ::= item star | (empty).
  uint32_t add_star(const GrammarElement& item, const std::string& hint);
  // A fresh rule matching `item` repeated 0 to `count` (>= 1) times, as nested optionals:
  // opt_k ::= item opt_(k-1) | (empty).
  uint32_t add_optionals(const GrammarElement& item, int count, const std::string& hint);
  // Building counts against `budget` (nullptr: no limits); compile() ends the counting. The
  // matcher's stacks per parse state are limited to budget's max_states from then on.
  void set_budget(GrammarBudget* budget);
  // Finalizes: lays the elements out, checks every rule is defined and not left-recursive.
  // Throws Error naming the rule. `root` is moved to rule 0.
  void compile(const std::string& root = "root");

  // After compile():
  uint32_t num_rules() const { return static_cast<uint32_t>(rule_alternatives_.size()); }
  const std::vector<uint32_t>& alternatives(uint32_t rule) const {
    return rule_alternatives_[rule];
  }
  const GrammarElement& at(uint32_t position) const { return elements_[position]; }
  uint32_t num_elements() const { return static_cast<uint32_t>(elements_.size()); }
  const std::string& rule_name(uint32_t rule) const { return names_[rule]; }
  // Stacks (and expansion steps) one parse state may take (see matcher.h).
  size_t max_stacks() const { return max_stacks_; }
  // The rules of add_optionals() whose item is a rule, repeated twice or more: where the
  // stacks of a state can multiply (see probe_states() in matcher.h).
  const std::vector<uint32_t>& bounded_repetitions() const { return bounded_; }
  // Bytes the compiled grammar holds, for cache accounting.
  size_t memory_bytes() const;

  static GrammarElement byte_set(const ByteSet& bytes);
  static GrammarElement literal_byte(uint8_t byte);
  static GrammarElement ref(uint32_t rule);

 private:
  std::vector<std::string> names_;
  std::unordered_map<std::string, uint32_t> index_;
  std::unordered_map<std::string, uint32_t> next_suffix_;          // new_rule's, by hint
  std::vector<std::vector<std::vector<GrammarElement>>> pending_;  // per rule, before compile()
  std::vector<GrammarElement> elements_;
  std::vector<std::vector<uint32_t>> rule_alternatives_;  // per rule: start positions
  // The rules of add_star and add_optionals whose first alternative starts with the item.
  std::vector<std::pair<uint32_t, GrammarElement>> repeated_;
  std::vector<uint32_t> bounded_;
  GrammarBudget* budget_ = nullptr;
  size_t max_stacks_ = GrammarLimits{}.max_states;
  bool compiled_ = false;

  std::vector<char> nullable_rules() const;
  void repeat_nonempty_items(const std::vector<char>& nullable);
  uint32_t nonempty(uint32_t rule, const std::vector<char>& nullable, std::vector<uint32_t>& made);
  void check_left_recursion(const std::vector<char>& nullable) const;
};

// A set of Unicode code points as sorted, disjoint, inclusive ranges.
using CodepointRanges = std::vector<std::pair<uint32_t, uint32_t>>;

// Normalizes (sorts, merges) ranges and, when `negate`, takes the complement within
// [0, 0x10FFFF] minus the surrogates.
CodepointRanges normalize_ranges(CodepointRanges ranges, bool negate);

// Appends to `grammar` a rule matching exactly the UTF-8 encodings of the code points in
// `ranges` (each a sequence of 1-4 byte sets) and returns it.
uint32_t add_codepoint_class(Grammar& grammar, const CodepointRanges& ranges,
                             const std::string& hint);

}  // namespace pagoda
