// GBNF, llama.cpp's grammar format, into a Grammar (see gbnf.h).
#include "grammar/gbnf.h"

#include <cctype>
#include <cstdio>
#include <map>
#include <optional>
#include <tuple>

#include "core/error.h"

namespace pagoda {
namespace {

class Parser {
 public:
  Parser(std::string_view text, Grammar& g) : s_(text), g_(g) {}

  void parse() {
    skip_space(true);
    if (pos_ >= s_.size()) error("the grammar is empty");
    while (pos_ < s_.size()) {
      const std::string name = parse_name();
      skip_space(false);
      if (s_.substr(pos_, 3) != "::=") error("expected '::=' after the rule name '" + name + "'");
      pos_ += 3;
      skip_space(true);
      const uint32_t rule = g_.rule(name);
      if (defined_.size() <= rule) defined_.resize(rule + 1, false);
      if (defined_[rule]) error("rule '" + name + "' is defined twice");
      defined_[rule] = true;
      parse_alternatives(rule, false);
      skip_space(true);
    }
  }

 private:
  // The largest count of a repetition, written or merged.
  static constexpr int kMaxCount = 100000;

  struct Repetition {
    GrammarElement item;
    int min, max;
  };

  [[noreturn]] void error(const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    fail("grammar ", line, ":", col, ": ", what);
  }

  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }

  // Spaces and comments; newlines too when `newlines` (inside parentheses, after '::=' or
  // '|'). At the top level a newline ends a rule's sequence unless the next line goes on
  // with '|'.
  void skip_space(bool newlines) {
    while (!at_end()) {
      const char c = s_[pos_];
      if (c == '#') {
        while (!at_end() && s_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++pos_;
      } else if (c == '\n') {
        // A continuation line starting with '|'.
        size_t p = pos_;
        while (p < s_.size() && std::isspace(static_cast<unsigned char>(s_[p]))) ++p;
        if (p < s_.size() && s_[p] == '|') {
          pos_ = p;
        } else {
          return;
        }
      } else {
        return;
      }
    }
  }

  static bool name_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (!at_end() && name_char(s_[pos_])) ++pos_;
    if (pos_ == start) error(std::string("expected a rule name, got '") + peek() + "'");
    return std::string(s_.substr(start, pos_ - start));
  }

  // Returns the only element of the only alternative, where the rule is just that.
  std::optional<GrammarElement> parse_alternatives(uint32_t rule, bool nested) {
    std::optional<GrammarElement> only;
    for (int n = 0;; ++n) {
      const std::vector<GrammarElement> seq = parse_sequence(nested);
      g_.add_alternative(rule, seq);
      only.reset();
      if (n == 0 && seq.size() == 1) only = seq[0];
      skip_space(nested);
      if (peek() != '|') break;
      ++pos_;
      skip_space(true);
    }
    return only;
  }

  uint32_t parse_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = peek();
      int d = -1;
      if (c >= '0' && c <= '9') d = c - '0';
      if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      if (d < 0) error("expected a hexadecimal digit");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    return v;
  }

  // A code point written as \u or \U: a Unicode scalar value, which UTF-8 can encode.
  uint32_t checked_codepoint(uint32_t cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) error("a surrogate code point has no UTF-8 encoding");
    if (cp > 0x10FFFF) error("a code point beyond U+10FFFF");
    return cp;
  }

  // One code point of a literal or class, escapes decoded.
  uint32_t parse_char() {
    if (at_end()) error("unexpected end of the grammar");
    const auto c = static_cast<unsigned char>(s_[pos_]);
    if (c == '\\') {
      ++pos_;
      const char e = peek();
      ++pos_;
      switch (e) {
        case 'x':
          return parse_hex(2);
        case 'u':
          return checked_codepoint(parse_hex(4));
        case 'U':
          return checked_codepoint(parse_hex(8));
        case 't':
          return '\t';
        case 'r':
          return '\r';
        case 'n':
          return '\n';
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/':
          return static_cast<uint32_t>(e);
        default:
          --pos_;
          error(std::string("unknown escape '\\") + e + "'");
      }
    }
    // A UTF-8 sequence in the grammar text.
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || pos_ + static_cast<size_t>(n) > s_.size()) error("invalid UTF-8 in the grammar");
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int i = 1; i < n; ++i) {
      const auto b = static_cast<unsigned char>(s_[pos_ + static_cast<size_t>(i)]);
      if ((b & 0xC0) != 0x80) error("invalid UTF-8 in the grammar");
      cp = (cp << 6) | (b & 0x3F);
    }
    pos_ += static_cast<size_t>(n);
    return cp;
  }

  void append_codepoint(uint32_t cp, std::vector<GrammarElement>& out) {
    if (cp > 0x10FFFF) error("code point out of range");
    uint8_t b[4];
    int n;
    if (cp < 0x80) {
      b[0] = static_cast<uint8_t>(cp);
      n = 1;
    } else if (cp < 0x800) {
      b[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
      b[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      n = 2;
    } else if (cp < 0x10000) {
      b[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
      b[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
      b[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      n = 3;
    } else {
      b[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
      b[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
      b[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
      b[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      n = 4;
    }
    for (int i = 0; i < n; ++i) out.push_back(Grammar::literal_byte(b[i]));
  }

  // A class [...] or '.': one element (a byte set, or a reference to a class rule).
  GrammarElement parse_class() {
    CodepointRanges ranges;
    bool negate = false;
    if (peek() == '.') {
      ++pos_;
      negate = true;  // everything
    } else {
      ++pos_;  // '['
      if (peek() == '^') {
        negate = true;
        ++pos_;
      }
      while (peek() != ']') {
        if (at_end()) error("unterminated character class");
        const uint32_t lo = parse_char();
        uint32_t hi = lo;
        if (peek() == '-' && pos_ + 1 < s_.size() && s_[pos_ + 1] != ']') {
          ++pos_;
          hi = parse_char();
          if (hi < lo) error("a character range runs backwards");
        }
        ranges.emplace_back(lo, hi);
      }
      ++pos_;  // ']'
    }
    const CodepointRanges set = normalize_ranges(ranges, negate);
    if (set.empty()) error("the character class matches nothing");
    if (set.back().second < 0x80) {
      ByteSet b;
      for (auto [lo, hi] : set) {
        for (uint32_t c = lo; c <= hi; ++c) b.set(c);
      }
      return Grammar::byte_set(b);
    }
    return Grammar::ref(add_codepoint_class(g_, set, "class"));
  }

  // One item of a sequence, before its repetition suffix: elements it stands for.
  std::vector<GrammarElement> parse_item(bool nested) {
    std::vector<GrammarElement> out;
    const char c = peek();
    if (c == '"') {
      ++pos_;
      while (peek() != '"') {
        if (at_end() || peek() == '\n') error("unterminated string literal");
        append_codepoint(parse_char(), out);
      }
      ++pos_;
    } else if (c == '[' || c == '.') {
      out.push_back(parse_class());
    } else if (c == '(') {
      if (++depth_ > kMaxDepth) error("groups nest deeper than " + std::to_string(kMaxDepth));
      ++pos_;
      skip_space(true);
      const uint32_t group = g_.new_rule("group");
      const std::optional<GrammarElement> only = parse_alternatives(group, true);
      skip_space(true);
      if (peek() != ')') error("expected ')'");
      ++pos_;
      --depth_;
      // A group of one element is that element, so that (X{m,n}){p,q} is seen as nested.
      out.push_back(only ? *only : Grammar::ref(group));
    } else if (name_char(c)) {
      const size_t start = pos_;
      const std::string name = parse_name();
      // A name followed by '::=' starts the next rule: the sequence ended before it.
      size_t p = pos_;
      while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t')) ++p;
      if (s_.substr(p, 3) == "::=") {
        pos_ = start;
        return {};
      }
      out.push_back(Grammar::ref(g_.rule(name)));
    } else {
      error(std::string("unexpected '") + c + "'");
    }
    return out;
  }

  // X repeated [min, max] times (max < 0: unbounded), as a reference to a rule. The same
  // one-element X with the same bounds shares the rule made the first time: a schema's fifty
  // strings of maxLength 100 unroll json-char{0,100} once, not fifty times.
  GrammarElement repeat(const std::vector<GrammarElement>& x, int min, int max) {
    if (x.size() == 1 && x[0].kind == GrammarElement::Kind::kRule) {
      if (auto it = repeat_of_.find(x[0].rule); it != repeat_of_.end()) {
        if (auto merged = merge(it->second, min, max)) return *merged;
      }
    }
    // One element standing for X.
    GrammarElement one;
    if (x.size() == 1) {
      one = x[0];
    } else {
      const uint32_t r = g_.new_rule("item");
      g_.add_alternative(r, x);
      one = Grammar::ref(r);
    }
    const RepeatKey key{
        one.kind == GrammarElement::Kind::kRule, one.rule,
        one.kind == GrammarElement::Kind::kRule ? std::string() : one.bytes.to_string(), min, max};
    if (x.size() == 1) {
      if (auto it = repeats_.find(key); it != repeats_.end()) return Grammar::ref(it->second);
    }
    const uint32_t rule = g_.new_rule("repeat");
    if (x.size() == 1) repeats_.emplace(key, rule);
    repeat_of_.emplace(rule, Repetition{one, min, max});
    std::vector<GrammarElement> seq(static_cast<size_t>(min), one);
    if (max < 0) {
      seq.push_back(Grammar::ref(g_.add_star(one, "star")));  // star ::= X star | (empty)
    } else if (max > min) {
      seq.push_back(Grammar::ref(g_.add_optionals(one, max - min, "opt")));  // at most max - min
    }
    g_.add_alternative(rule, seq);
    return Grammar::ref(rule);
  }

  // (X{a,b}){min,max} as X{a*min, b*max}, where that is the same set of strings: the counts
  // a*i..b*i of i = min..max leave no gap. Nested as written, each X could end either
  // repetition, and the stacks of a parse state would multiply with every byte.
  std::optional<GrammarElement> merge(const Repetition& inner, int min, int max) {
    const int64_t a = inner.min, b = inner.max;  // b < 0: unbounded
    const bool no_gap = min == max || (b < 0 ? min >= 1 || a <= 1 : (b - a) * min >= a - 1);
    const int64_t lo = a * min, hi = b < 0 || max < 0 ? -1 : b * max;
    if (!no_gap || lo > kMaxCount || hi > kMaxCount) return std::nullopt;
    return repeat({inner.item}, static_cast<int>(lo), static_cast<int>(hi));
  }

  int parse_int() {
    const size_t start = pos_;
    int v = 0;
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      v = v * 10 + (peek() - '0');
      if (v > kMaxCount) error("repetition count too large");
      ++pos_;
    }
    if (pos_ == start) error("expected a number");
    return v;
  }

  std::vector<GrammarElement> parse_sequence(bool nested) {
    std::vector<GrammarElement> seq;
    for (;;) {
      skip_space(nested);
      const char c = peek();
      if (at_end() || c == '|' || c == ')' || (c == '\n' && !nested)) break;
      std::vector<GrammarElement> item = parse_item(nested);
      if (item.empty()) break;  // the next rule starts here
      const char r = peek();
      if (r == '*' || r == '+' || r == '?' || r == '{') {
        int min = 0, max = -1;
        ++pos_;
        if (r == '+') min = 1;
        if (r == '?') max = 1;
        if (r == '{') {
          skip_space(true);
          min = parse_int();
          skip_space(true);
          max = min;
          if (peek() == ',') {
            ++pos_;
            skip_space(true);
            max = peek() == '}' ? -1 : parse_int();
            skip_space(true);
          }
          if (peek() != '}') error("expected '}'");
          ++pos_;
          if (max >= 0 && max < min) error("repetition {m,n} with n < m");
        }
        seq.push_back(repeat(item, min, max));
      } else {
        seq.insert(seq.end(), item.begin(), item.end());
      }
    }
    return seq;
  }

  // Parentheses inside parentheses, at most (the parser recurses on them).
  static constexpr int kMaxDepth = 256;

  // A repetition's element (a rule reference, or a byte set as text) and bounds.
  using RepeatKey = std::tuple<bool, uint32_t, std::string, int, int>;

  std::string_view s_;
  Grammar& g_;
  size_t pos_ = 0;
  int depth_ = 0;
  std::map<RepeatKey, uint32_t> repeats_;
  std::map<uint32_t, Repetition> repeat_of_;  // the rules made by repeat()
  std::vector<bool> defined_;
};

}  // namespace

Grammar parse_gbnf(std::string_view text, const std::string& root, GrammarBudget* budget) {
  Grammar g;
  g.set_budget(budget);
  Parser(text, g).parse();
  g.compile(root);
  return g;
}

std::string gbnf_literal(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\' || c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace pagoda
