#include "grammar/grammar.h"

#include <algorithm>
#include <functional>

#include "core/error.h"

namespace pagoda {

uint32_t Grammar::rule(const std::string& name) {
  PAGODA_CHECK(!compiled_);
  auto [it, added] = index_.emplace(name, static_cast<uint32_t>(names_.size()));
  if (added) {
    names_.push_back(name);
    pending_.emplace_back();
  }
  return it->second;
}

uint32_t Grammar::new_rule(const std::string& hint) {
  std::string name = hint;
  for (int i = 1; index_.count(name); ++i) name = hint + "-" + std::to_string(i);
  return rule(name);
}

void Grammar::add_alternative(uint32_t rule, const std::vector<GrammarElement>& elements) {
  PAGODA_CHECK(!compiled_ && rule < pending_.size());
  pending_[rule].push_back(elements);
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
  for (auto& alts : pending_) {
    for (auto& alt : alts) {
      for (GrammarElement& e : alt) {
        if (e.kind == GrammarElement::Kind::kRule) e.rule = remap(e.rule);
      }
    }
  }
  for (uint32_t r = 0; r < names_.size(); ++r) {
    if (pending_[r].empty()) fail("grammar: rule '", names_[r], "' is used but never defined");
  }
  // Left recursion: rule A can reach a reference to A at the start of an alternative, through
  // rules that may match nothing.
  std::vector<char> nullable(names_.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t r = 0; r < names_.size(); ++r) {
      if (nullable[r]) continue;
      for (const auto& alt : pending_[r]) {
        bool all = true;
        for (const GrammarElement& e : alt) {
          all = all && e.kind == GrammarElement::Kind::kRule && nullable[e.rule];
        }
        if (all) {
          nullable[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  std::vector<char> state(names_.size(), 0);  // 0 new, 1 on the path, 2 done
  std::function<void(uint32_t)> visit = [&](uint32_t r) {
    state[r] = 1;
    for (const auto& alt : pending_[r]) {
      for (const GrammarElement& e : alt) {
        if (e.kind != GrammarElement::Kind::kRule) break;
        if (state[e.rule] == 1) {
          fail("grammar: rule '", names_[e.rule], "' is left-recursive (it can start with itself)");
        }
        if (state[e.rule] == 0) visit(e.rule);
        if (!nullable[e.rule]) break;
      }
    }
    state[r] = 2;
  };
  for (uint32_t r = 0; r < names_.size(); ++r) {
    if (state[r] == 0) visit(r);
  }
  rule_alternatives_.assign(names_.size(), {});
  for (uint32_t r = 0; r < names_.size(); ++r) {
    for (const auto& alt : pending_[r]) {
      rule_alternatives_[r].push_back(static_cast<uint32_t>(elements_.size()));
      elements_.insert(elements_.end(), alt.begin(), alt.end());
      elements_.push_back(GrammarElement{});  // kEnd
    }
  }
  pending_.clear();
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
