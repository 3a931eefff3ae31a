// Regular expressions to GBNF (see regex.h): a recursive-descent parse emitting the GBNF
// expression as it goes; GBNF has groups, alternation, classes and counted repetition, so the
// translation is one to one.
#include "grammar/regex.h"

#include <cstdio>
#include <vector>

#include "core/error.h"
#include "grammar/grammar.h"

namespace pagoda {
namespace {

std::string hex_char(uint32_t cp) {
  char buf[16];
  if (cp < 0x100) {
    std::snprintf(buf, sizeof buf, "\\x%02X", cp);
  } else if (cp < 0x10000) {
    std::snprintf(buf, sizeof buf, "\\u%04X", cp);
  } else {
    std::snprintf(buf, sizeof buf, "\\U%08X", cp);
  }
  return buf;
}

class RegexParser {
 public:
  RegexParser(std::string_view p, const RegexOptions& o) : p_(p), o_(o) {}

  std::string parse() {
    if (!p_.empty() && p_[0] == '^') ++pos_;
    std::string out = alternation();
    if (pos_ < p_.size()) error(std::string("unexpected '") + p_[pos_] + "'");
    return out;
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    fail("regex '", p_, "' at ", pos_, ": ", what);
  }
  bool at_end() const { return pos_ >= p_.size(); }
  char peek() const { return at_end() ? '\0' : p_[pos_]; }

  std::string alternation() {
    std::vector<std::string> alts = {concatenation()};
    while (peek() == '|') {
      ++pos_;
      alts.push_back(concatenation());
    }
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
  }

  std::string concatenation() {
    std::string out;
    while (!at_end() && peek() != '|' && peek() != ')') {
      // A trailing $ anchors nothing more than the whole-match rule already does.
      if (peek() == '$' && pos_ + 1 == p_.size()) {
        ++pos_;
        break;
      }
      std::string item = atom();
      item = quantified(item);
      out += (out.empty() ? "" : " ") + item;
    }
    return out.empty() ? "\"\"" : out;
  }

  std::string quantified(const std::string& item) {
    const char q = peek();
    std::string suffix;
    if (q == '*' || q == '+' || q == '?') {
      ++pos_;
      suffix = std::string(1, q);
    } else if (q == '{') {
      const size_t start = pos_;
      ++pos_;
      std::string body;
      while (!at_end() && peek() != '}') body += p_[pos_++];
      if (at_end()) error("unterminated {m,n}");
      ++pos_;
      for (char c : body) {
        if (!(c == ',' || (c >= '0' && c <= '9'))) {
          pos_ = start;
          error("a quantifier {" + body + "} that is not {m}, {m,} or {m,n}");
        }
      }
      suffix = "{" + body + "}";
    } else {
      return item;
    }
    if (peek() == '?') ++pos_;  // lazy: the same set of matches
    if (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{') {
      error("a quantifier after a quantifier");
    }
    return "(" + item + ")" + suffix;
  }

  // A class as code point ranges, escapes decoded.
  void class_escape(char e, CodepointRanges& r, bool& negated_shorthand) {
    switch (e) {
      case 'd':
        r.push_back({'0', '9'});
        return;
      case 'w':
        r.insert(r.end(), {{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {'_', '_'}});
        return;
      case 's':
        r.insert(r.end(), {{' ', ' '}, {'\t', '\r'}});
        return;
      case 'D':
      case 'W':
      case 'S':
        negated_shorthand = true;
        return;
      default:
        r.push_back({escaped_char(e), escaped_char(e)});
    }
  }

  uint32_t escaped_char(char e) {
    switch (e) {
      case 'n':
        return '\n';
      case 't':
        return '\t';
      case 'r':
        return '\r';
      case 'f':
        return '\f';
      case 'v':
        return '\v';
      case '0':
        return 0;
      case 'x':
        return hex(2);
      case 'u': {
        const uint32_t cp = hex(4);
        if (cp >= 0xD800 && cp <= 0xDFFF) error("a surrogate code point has no UTF-8 encoding");
        return cp;
      }
      default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '1' && e <= '9')) {
          error(std::string("unsupported escape '\\") + e +
                "' (backreferences, \\b and the like "
                "cannot be expressed)");
        }
        return static_cast<unsigned char>(e);
    }
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = peek();
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) error("expected a hexadecimal digit");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    return v;
  }

  uint32_t utf8_char() {
    const auto c = static_cast<unsigned char>(p_[pos_]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || pos_ + static_cast<size_t>(n) > p_.size()) error("invalid UTF-8");
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<unsigned char>(p_[pos_ + i]) & 0x3F);
    pos_ += static_cast<size_t>(n);
    return cp;
  }

  // A set of code points as GBNF: a class, plus the escaped forms of '"' and '\' inside a JSON
  // string.
  std::string emit_set(CodepointRanges ranges, bool negate) {
    CodepointRanges set = normalize_ranges(std::move(ranges), negate);
    bool quote = false, backslash = false;
    if (o_.json_string) {
      auto in = [&](uint32_t c) {
        for (auto [lo, hi] : set) {
          if (c >= lo && c <= hi) return true;
        }
        return false;
      };
      quote = in('"');
      backslash = in('\\');
      // Remove controls, '"' and '\'.
      set = normalize_ranges(set, true);
      set.insert(set.end(), {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}});
      set = normalize_ranges(set, true);
    }
    std::vector<std::string> alts;
    if (!set.empty()) {
      std::string cls = "[";
      for (auto [lo, hi] : set) {
        cls += hex_char(lo);
        if (hi > lo) {
          cls += '-';
          cls += hex_char(hi);
        }
      }
      alts.push_back(cls + "]");
    }
    if (quote) alts.push_back("\"\\\\\\\"\"");      // the two characters \"
    if (backslash) alts.push_back("\"\\\\\\\\\"");  // the two characters \\ (escaped)
    if (alts.empty()) error("a character set with nothing a JSON string may hold unescaped");
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
  }

  std::string literal(uint32_t cp) {
    if (o_.json_string && (cp < 0x20 || cp == '"' || cp == '\\'))
      return emit_set({{cp, cp}}, false);
    std::string quoted = "\"";
    quoted += hex_char(cp);
    return quoted + '"';
  }

  std::string atom() {
    const char c = peek();
    if (c == '(') {
      if (++depth_ > kMaxDepth) error("groups nest deeper than " + std::to_string(kMaxDepth));
      ++pos_;
      if (peek() == '?') {
        if (pos_ + 1 < p_.size() && p_[pos_ + 1] == ':') {
          pos_ += 2;
        } else {
          error("only (?: ) groups are supported (no lookaround or named groups)");
        }
      }
      std::string inner = alternation();
      if (peek() != ')') error("expected ')'");
      ++pos_;
      --depth_;
      return "(" + inner + ")";
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++pos_;
      return emit_set({{'\n', '\n'}}, true);
    }
    if (c == '\\') {
      ++pos_;
      if (at_end()) error("a trailing backslash");
      const char e = p_[pos_++];
      CodepointRanges r;
      bool negated = false;
      if (e == 'D' || e == 'W' || e == 'S') {
        class_escape(static_cast<char>(e - 'A' + 'a'), r, negated);
        return emit_set(r, true);
      }
      if (e == 'd' || e == 'w' || e == 's') {
        class_escape(e, r, negated);
        return emit_set(r, false);
      }
      return literal(escaped_char(e));
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') error("a quantifier with nothing before it");
    if (c == '^' || c == '$') error("anchors are only allowed at the ends");
    return literal(utf8_char());
  }

  std::string char_class() {
    ++pos_;  // '['
    bool negate = false;
    if (peek() == '^') {
      negate = true;
      ++pos_;
    }
    CodepointRanges r;
    bool first = true;
    while (first || peek() != ']') {
      if (at_end()) error("unterminated character class");
      first = false;
      uint32_t lo;
      if (peek() == '\\') {
        ++pos_;
        const char e = p_[pos_++];
        if (e == 'd' || e == 'w' || e == 's') {
          bool unused = false;
          class_escape(e, r, unused);
          continue;
        }
        if (e == 'D' || e == 'W' || e == 'S') error("\\D, \\W and \\S inside a class");
        lo = escaped_char(e);
      } else {
        lo = utf8_char();
      }
      uint32_t hi = lo;
      if (peek() == '-' && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
        ++pos_;
        if (peek() == '\\') {
          ++pos_;
          hi = escaped_char(p_[pos_++]);
        } else {
          hi = utf8_char();
        }
        if (hi < lo) error("a range that runs backwards");
      }
      r.push_back({lo, hi});
    }
    ++pos_;  // ']'
    return emit_set(r, negate);
  }

  // Groups inside groups, at most (the parser recurses on them).
  static constexpr int kMaxDepth = 256;

  std::string_view p_;
  RegexOptions o_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

std::string regex_to_gbnf(std::string_view pattern, const std::string& rule_name,
                          const RegexOptions& options) {
  return rule_name + " ::= " + RegexParser(pattern, options).parse() + "\n";
}

}  // namespace pagoda
