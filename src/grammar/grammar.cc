#include "grammar/grammar.h"

#include <algorithm>
#include <functional>

#include "core/error.h"

namespace pagoda {

uint32_t Grammar::rule(const std::string& name) {
  PAGODA_CHECK(!compiled_);
  auto [it, added] = index_.emplace(name, static_cast<uint32_t>(names_.size()));
  if (added) {
    if (budget_ != nullptr) budget_->add_states(1);
    names_.push_back(name);
    pending_.emplace_back();
  }
  return it->second;
}

// Suffixes count on from the last one given for the hint: probing from 1 each time would make
// "a"{0,65535}'s helper rules quadratic.
uint32_t Grammar::new_rule(const std::string& hint) {
  std::string name = hint;
  for (uint32_t& n = next_suffix_[hint]; index_.count(name);) {
    name = hint + "-" + std::to_string(++n);
  }
  return rule(name);
}

void Grammar::add_alternative(uint32_t rule, const std::vector<GrammarElement>& elements) {
  PAGODA_CHECK(!compiled_ && rule < pending_.size());
  if (budget_ != nullptr) budget_->add_states(elements.size() + 1);
  pending_[rule].push_back(elements);
}

uint32_t Grammar::add_star(const GrammarElement& item, const std::string& hint) {
  const uint32_t star = new_rule(hint);
  add_alternative(star, {item, ref(star)});
  add_alternative(star, {});
  repeated_.emplace_back(star, item);
  return star;
}

uint32_t Grammar::add_optionals(const GrammarElement& item, int count, const std::string& hint) {
  uint32_t tail = new_rule(hint);
  add_alternative(tail, {item});
  add_alternative(tail, {});
  repeated_.emplace_back(tail, item);
  for (int i = 1; i < count; ++i) {
    const uint32_t outer = new_rule(hint);
    add_alternative(outer, {item, ref(tail)});
    add_alternative(outer, {});
    repeated_.emplace_back(outer, item);
    tail = outer;
  }
  if (count >= 2 && item.kind == GrammarElement::Kind::kRule) bounded_.push_back(tail);
  return tail;
}

void Grammar::set_budget(GrammarBudget* budget) {
  budget_ = budget;
  if (budget != nullptr) max_stacks_ = budget->limits().max_states;
}

size_t Grammar::memory_bytes() const {
  size_t n = sizeof(*this) + elements_.capacity() * sizeof(GrammarElement);
  for (const auto& alts : rule_alternatives_)
    n += sizeof(alts) + alts.capacity() * sizeof(uint32_t);
  for (const auto& name : names_) n += sizeof(name) + name.capacity();
  return n;
}

GrammarElement Grammar::byte_set(const ByteSet& bytes) {
  GrammarElement e;
  e.kind = GrammarElement::Kind::kBytes;
  e.bytes = bytes;
  return e;
}

GrammarElement Grammar::literal_byte(uint8_t byte) {
  ByteSet b;
  b.set(byte);
  return byte_set(b);
}

GrammarElement Grammar::ref(uint32_t rule) {
  GrammarElement e;
  e.kind = GrammarElement::Kind::kRule;
  e.rule = rule;
  return e;
}

// Which rules can match nothing, by a work list: an alternative of references only is nullable
// once each rule it references is.
std::vector<char> Grammar::nullable_rules() const {
  const size_t n = names_.size();
  std::vector<char> nullable(n, 0);
  std::vector<uint32_t> owner, left;           // per candidate alternative
  std::vector<std::vector<uint32_t>> uses(n);  // rule -> candidate alternatives naming it
  std::vector<uint32_t> ready;
  for (uint32_t r = 0; r < n; ++r) {
    for (const auto& alt : pending_[r]) {
      bool bytes = false;
      for (const GrammarElement& e : alt) bytes = bytes || e.kind == GrammarElement::Kind::kBytes;
      if (bytes) continue;
      const auto id = static_cast<uint32_t>(owner.size());
      owner.push_back(r);
      left.push_back(static_cast<uint32_t>(alt.size()));
      for (const GrammarElement& e : alt) uses[e.rule].push_back(id);
      if (alt.empty() && !nullable[r]) {
        nullable[r] = 1;
        ready.push_back(r);
      }
    }
  }
  while (!ready.empty()) {
    const uint32_t r = ready.back();
    ready.pop_back();
    if (budget_ != nullptr) budget_->tick();
    for (uint32_t id : uses[r]) {
      if (--left[id] == 0 && !nullable[owner[id]]) {
        nullable[owner[id]] = 1;
        ready.push_back(owner[id]);
      }
    }
  }
  return nullable;
}

// A rule matching what `rule` matches except the empty string (made once, in `made`): each
// alternative e1 e2 ... en becomes, for each i up to the first ei that cannot match nothing,
// "e1..e(i-1) match nothing, ei matches something, the rest as they are".
uint32_t Grammar::nonempty(uint32_t rule, const std::vector<char>& nullable,
                           std::vector<uint32_t>& made) {
  if (made[rule] != UINT32_MAX) return made[rule];
  const uint32_t out = new_rule(names_[rule] + "-nonempty");
  made[rule] = out;
  const auto alts = pending_[rule];  // a copy: new rules grow pending_
  bool any = false;
  for (const auto& alt : alts) {
    for (size_t i = 0; i < alt.size(); ++i) {
      std::vector<GrammarElement> seq(alt.begin() + static_cast<ptrdiff_t>(i), alt.end());
      const GrammarElement& e = alt[i];
      // Rules made here (a repetition's item rewritten before) never match nothing.
      const bool skippable =
          e.kind == GrammarElement::Kind::kRule && e.rule < nullable.size() && nullable[e.rule];
      if (skippable) seq[0] = ref(nonempty(e.rule, nullable, made));
      add_alternative(out, seq);
      any = true;
      if (!skippable) break;
    }
  }
  // Only the empty string: an alternative no byte matches.
  if (!any) add_alternative(out, {byte_set(ByteSet{})});
  return out;
}

// X* with an X that can match nothing would expand X* again without consuming a byte: it
// repeats X without its empty match instead, which matches the same strings. So does X{0,n}:
// its optionals would each expand the next through X's empty match, n deep at every byte.
void Grammar::repeat_nonempty_items(const std::vector<char>& nullable) {
  std::vector<uint32_t> made(names_.size(), UINT32_MAX);
  for (const auto& [star, item] : repeated_) {
    if (item.kind != GrammarElement::Kind::kRule || !nullable[item.rule]) continue;
    const uint32_t x = nonempty(item.rule, nullable, made);
    pending_[star][0][0] = ref(x);
  }
}

// Left recursion: rule A can reach a reference to A at the start of an alternative, through
// rules that may match nothing. A depth-first search with its own stack (a chain of rules
// as long as the budget allows would overflow the thread's).
void Grammar::check_left_recursion(const std::vector<char>& nullable) const {
  struct Frame {
    uint32_t rule, alt, element;
  };
  std::vector<char> state(names_.size(), 0);  // 0 new, 1 on the path, 2 done
  std::vector<Frame> path;
  for (uint32_t start = 0; start < names_.size(); ++start) {
    if (state[start] != 0) continue;
    state[start] = 1;
    path.push_back({start, 0, 0});
    while (!path.empty()) {
      Frame& f = path.back();
      const auto& alts = pending_[f.rule];
      if (f.alt == alts.size()) {
        state[f.rule] = 2;
        path.pop_back();
        continue;
      }
      const auto& alt = alts[f.alt];
      if (f.element == alt.size() || alt[f.element].kind != GrammarElement::Kind::kRule) {
        ++f.alt;
        f.element = 0;
        continue;
      }
      const uint32_t next = alt[f.element].rule;
      if (nullable[next]) {
        ++f.element;
      } else {
        ++f.alt;
        f.element = 0;
      }
      if (state[next] == 1) {
        fail("grammar: rule '", names_[next], "' is left-recursive (it can start with itself)");
      }
      if (state[next] == 0) {
        if (budget_ != nullptr) budget_->tick();
        state[next] = 1;
        path.push_back({next, 0, 0});
      }
    }
  }
}

void Grammar::compile(const std::string& root) {
  PAGODA_CHECK(!compiled_);
  uint32_t root_id = UINT32_MAX;
  for (uint32_t i = 0; i < names_.size(); ++i) {
    if (names_[i] == root) root_id = i;
  }
  if (root_id == UINT32_MAX) fail("grammar: there is no rule '", root, "'");
  // Root first: swap ids 0 and root_id everywhere.
  auto remap = [&](uint32_t r) { return r == root_id ? 0u : r == 0 ? root_id : r; };
  std::swap(names_[0], names_[root_id]);
  std::swap(pending_[0], pending_[root_id]);
  index_[names_[0]] = 0;
  index_[names_[root_id]] = root_id;
  for (auto& alts : pending_) {
    for (auto& alt : alts) {
      for (GrammarElement& e : alt) {
        if (e.kind == GrammarElement::Kind::kRule) e.rule = remap(e.rule);
      }
    }
  }
  for (auto& [star, item] : repeated_) {
    star = remap(star);
    if (item.kind == GrammarElement::Kind::kRule) item.rule = remap(item.rule);
  }
  for (uint32_t& r : bounded_) r = remap(r);
  for (uint32_t r = 0; r < names_.size(); ++r) {
    if (pending_[r].empty()) fail("grammar: rule '", names_[r], "' is used but never defined");
  }
  std::vector<char> nullable = nullable_rules();
  repeat_nonempty_items(nullable);
  nullable.resize(names_.size(), 0);  // the rules made above never match nothing
  check_left_recursion(nullable);
  rule_alternatives_.assign(names_.size(), {});
  for (uint32_t r = 0; r < names_.size(); ++r) {
    for (const auto& alt : pending_[r]) {
      rule_alternatives_[r].push_back(static_cast<uint32_t>(elements_.size()));
      elements_.insert(elements_.end(), alt.begin(), alt.end());
      elements_.push_back(GrammarElement{});  // kEnd
    }
  }
  pending_.clear();
  pending_.shrink_to_fit();
  index_.clear();
  next_suffix_.clear();
  repeated_.clear();
  repeated_.shrink_to_fit();
  budget_ = nullptr;
  compiled_ = true;
}

CodepointRanges normalize_ranges(CodepointRanges ranges, bool negate) {
  std::sort(ranges.begin(), ranges.end());
  CodepointRanges merged;
  for (auto [lo, hi] : ranges) {
    if (lo > hi) continue;
    if (!merged.empty() && lo <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, hi);
    } else {
      merged.emplace_back(lo, hi);
    }
  }
  CodepointRanges out;
  if (negate) {
    uint32_t next = 0;
    for (auto [lo, hi] : merged) {
      if (lo > next) out.emplace_back(next, lo - 1);
      next = hi + 1;
    }
    if (next <= 0x10FFFF) out.emplace_back(next, 0x10FFFF);
  } else {
    out = std::move(merged);
  }
  // Surrogates have no UTF-8 encoding.
  CodepointRanges valid;
  for (auto [lo, hi] : out) {
    hi = std::min<uint32_t>(hi, 0x10FFFF);
    if (lo > hi) continue;
    if (hi < 0xD800 || lo > 0xDFFF) {
      valid.emplace_back(lo, hi);
      continue;
    }
    if (lo < 0xD800) valid.emplace_back(lo, 0xD7FF);
    if (hi > 0xDFFF) valid.emplace_back(0xE000, hi);
  }
  return valid;
}

namespace {

int utf8_length(uint32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

void utf8_encode(uint32_t c, uint8_t* out) {
  switch (utf8_length(c)) {
    case 1:
      out[0] = static_cast<uint8_t>(c);
      break;
    case 2:
      out[0] = static_cast<uint8_t>(0xC0 | (c >> 6));
      out[1] = static_cast<uint8_t>(0x80 | (c & 0x3F));
      break;
    case 3:
      out[0] = static_cast<uint8_t>(0xE0 | (c >> 12));
      out[1] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F));
      out[2] = static_cast<uint8_t>(0x80 | (c & 0x3F));
      break;
    default:
      out[0] = static_cast<uint8_t>(0xF0 | (c >> 18));
      out[1] = static_cast<uint8_t>(0x80 | ((c >> 12) & 0x3F));
      out[2] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F));
      out[3] = static_cast<uint8_t>(0x80 | (c & 0x3F));
  }
}

// Splits [lo, hi] (one encoded length) until each piece is a product of byte ranges, then
// emits one sequence of byte sets per piece.
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<ByteSet>>& out) {
  const int n = utf8_length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  utf8_encode(lo, a);
  utf8_encode(hi, b);
  std::vector<ByteSet> seq(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    for (int v = a[i]; v <= b[i]; ++v) seq[static_cast<size_t>(i)].set(static_cast<size_t>(v));
  }
  out.push_back(std::move(seq));
}

}  // namespace

uint32_t add_codepoint_class(Grammar& grammar, const CodepointRanges& ranges,
                             const std::string& hint) {
  std::vector<std::vector<ByteSet>> seqs;
  for (auto [lo, hi] : ranges) {
    // Split at the encoded-length boundaries first.
    for (uint32_t edge : {0x7Fu, 0x7FFu, 0xFFFFu, 0x10FFFFu}) {
      if (lo > hi) break;
      if (lo > edge) continue;
      const uint32_t end = std::min(hi, edge);
      utf8_sequences(lo, end, seqs);
      lo = end + 1;
    }
  }
  const uint32_t rule = grammar.new_rule(hint);
  // One-byte sequences merge into a single set; the rest stay as they are.
  ByteSet single;
  for (const auto& seq : seqs) {
    if (seq.size() == 1) single |= seq[0];
  }
  if (single.any()) grammar.add_alternative(rule, {Grammar::byte_set(single)});
  for (const auto& seq : seqs) {
    if (seq.size() == 1) continue;
    std::vector<GrammarElement> alt;
    for (const ByteSet& b : seq) alt.push_back(Grammar::byte_set(b));
    grammar.add_alternative(rule, alt);
  }
  if (seqs.empty()) fail("grammar: the character class ", hint, " matches no character");
  return rule;
}

}  // namespace pagoda
