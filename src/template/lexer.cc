// Template lexer (see lexer.h). The rules follow jinja2's lexer as configured by Hugging Face
// transformers: block and comment tags eat one following newline (trim_blocks) and the spaces
// before them on their line (lstrip_blocks); `-` strips all whitespace on that side; `+` keeps it.
#include "template/lexer.h"

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "template/text.h"

namespace pagoda::jinja {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

std::string normalize_newlines(std::string_view source, bool keep_trailing_newline) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string src, const LexOptions& options) : src_(std::move(src)), options_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    size_t n = src_.size();
    while (pos_ < n) {
      size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit_data(pos_, src_.substr(pos_));
        break;
      }
      lex_tag(tag);
    }
    Token eof;
    eof.type = TokenType::kEof;
    eof.pos = pos_at(src_.size());
    tokens_.push_back(eof);
    return std::move(tokens_);
  }

 private:
  // Line and column (in code points) of a byte offset. Tokens arrive in order, so the column is
  // counted on from the previous token when it lies on the same line (linear, not quadratic).
  Pos pos_at(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line = static_cast<size_t>(it - line_starts_.begin());
    size_t start = line_starts_[line - 1];
    size_t from = start;
    int col = 1;
    if (cached_line_ == line && cached_offset_ <= offset) {
      from = cached_offset_;
      col = cached_col_;
    }
    col += static_cast<int>(num_code_points(std::string_view(src_).substr(from, offset - from)));
    cached_line_ = line;
    cached_offset_ = offset;
    cached_col_ = col;
    Pos p;
    p.line = static_cast<int>(line);
    p.col = col;
    return p;
  }

  [[noreturn]] void fail_at(size_t offset, const std::string& message) const {
    RenderError e(message);
    e.set_pos(pos_at(offset));
    throw e;
  }

  size_t find_tag(size_t from) const {
    size_t p = from;
    while ((p = src_.find('{', p)) != std::string::npos) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) {
        return p;
      }
      ++p;
    }
    return std::string::npos;
  }

  // Python's `\s*` (Unicode whitespace) from p; returns the first non-space offset.
  size_t skip_space(size_t p) const {
    while (p < src_.size()) {
      size_t next = p;
      char32_t c = next_code_point(src_, &next);
      if (!is_space(c)) break;
      p = next;
    }
    return p;
  }

  bool starts_with(size_t p, std::string_view s) const {
    return src_.compare(p, s.size(), s) == 0 && p + s.size() <= src_.size();
  }

  void emit(TokenType type, size_t offset, std::string text = {}) {
    Token t;
    t.type = type;
    t.pos = pos_at(offset);
    t.text = std::move(text);
    tokens_.push_back(std::move(t));
  }

  void emit_data(size_t offset, std::string text) {
    if (!text.empty()) emit(TokenType::kData, offset, std::move(text));
  }

  // Applies the `-` and lstrip_blocks rules to the text before a tag.
  std::string strip_before(std::string text, char sign, bool is_variable) const {
    if (sign == '-') return py_strip(text, nullptr, false, true);
    if (sign != '+' && options_.lstrip_blocks && !is_variable) {
      size_t l_pos = text.rfind('\n');
      l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
      if (l_pos > 0 || line_starting_) {
        std::string_view tail = std::string_view(text).substr(l_pos);
        if (!tail.empty() && py_strip(tail, nullptr, true, false).empty()) text.resize(l_pos);
      }
    }
    return text;
  }

  // After a block or comment end marker ('+', '-' or none) at offset p (just past the marker).
  size_t after_block_end(size_t p, char sign) const {
    if (sign == '-') return skip_space(p);
    if (sign != '+' && options_.trim_blocks && p < src_.size() && src_[p] == '\n') return p + 1;
    return p;
  }

  // Matches `raw\s*(-%}\s*|%})` (after `{%` and its sign and spaces) and returns the end offset.
  size_t match_raw_begin(size_t p) const {
    p = skip_space(p);
    if (!starts_with(p, "raw")) return std::string::npos;
    p = skip_space(p + 3);
    if (starts_with(p, "-%}")) return skip_space(p + 3);
    if (starts_with(p, "%}")) return p + 2;
    return std::string::npos;
  }

  void lex_tag(size_t tag) {
    char kind = src_[tag + 1];
    size_t p = tag + 2;
    char sign = 0;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
    size_t raw_end = kind == '%' ? match_raw_begin(p) : std::string::npos;
    emit_data(pos_, strip_before(src_.substr(pos_, tag - pos_), sign, kind == '{'));
    line_starting_ = false;
    if (raw_end != std::string::npos) {
      line_starting_ = src_[raw_end - 1] == '\n';
      lex_raw(tag, raw_end);
    } else if (kind == '#') {
      lex_comment(tag, p);
    } else {
      lex_expression(tag, p, kind == '%');
    }
  }

  void lex_raw(size_t tag, size_t p) {
    size_t search = p;
    while (true) {
      size_t q = src_.find("{%", search);
      if (q == std::string::npos) fail_at(tag, "missing end of raw directive ({% endraw %})");
      size_t r = q + 2;
      char sign = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) sign = src_[r++];
      r = skip_space(r);
      if (starts_with(r, "endraw")) {
        size_t e = skip_space(r + 6);
        char end_sign = 0;
        if (e < src_.size() && (src_[e] == '-' || src_[e] == '+') && starts_with(e + 1, "%}")) {
          end_sign = src_[e++];
        }
        if (starts_with(e, "%}")) {
          emit_data(p, strip_before(src_.substr(p, q - p), sign, false));
          pos_ = after_block_end(e + 2, end_sign);
          line_starting_ = pos_ > 0 && src_[pos_ - 1] == '\n';
          return;
        }
      }
      search = q + 2;
    }
  }

  void lex_comment(size_t tag, size_t p) {
    size_t q = src_.find("#}", p);
    if (q == std::string::npos) fail_at(tag, "missing end of comment tag ('#}')");
    char sign = 0;
    if (q > p && (src_[q - 1] == '-' || src_[q - 1] == '+')) sign = src_[q - 1];
    pos_ = after_block_end(q + 2, sign);
    line_starting_ = src_[pos_ - 1] == '\n';
  }

  // Consumes `(\d+_)*\d+` from p; returns the end or npos when p holds no digit.
  size_t match_digits(size_t p) const {
    if (p >= src_.size() || !is_digit(src_[p])) return std::string::npos;
    while (p < src_.size()) {
      if (is_digit(src_[p])) {
        ++p;
      } else if (src_[p] == '_' && p + 1 < src_.size() && is_digit(src_[p + 1])) {
        ++p;
      } else {
        break;
      }
    }
    return p;
  }

  size_t match_exponent(size_t p) const {
    if (p >= src_.size() || (src_[p] != 'e' && src_[p] != 'E')) return std::string::npos;
    ++p;
    if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
    return match_digits(p);
  }

  size_t match_float(size_t p) const {
    if (p > 0 && src_[p - 1] == '.') return std::string::npos;
    size_t q = match_digits(p);
    if (q == std::string::npos) return q;
    size_t frac = std::string::npos;
    if (q < src_.size() && src_[q] == '.') frac = match_digits(q + 1);
    size_t e = match_exponent(frac != std::string::npos ? frac : q);
    if (e != std::string::npos) return e;
    return frac;
  }

  // Returns the end of an integer literal at p and its base, or npos.
  size_t match_integer(size_t p, int* base) const {
    if (src_[p] == '0' && p + 1 < src_.size()) {
      char x = static_cast<char>(src_[p + 1] | 0x20);
      int b = x == 'b' ? 2 : x == 'o' ? 8 : x == 'x' ? 16 : 0;
      if (b != 0) {
        size_t q = p + 2;
        size_t end = std::string::npos;
        while (q < src_.size()) {
          size_t d = q < src_.size() && src_[q] == '_' ? q + 1 : q;
          if (d >= src_.size()) break;
          char c = static_cast<char>(src_[d] | 0x20);
          int v = is_digit(src_[d]) ? src_[d] - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : 99;
          if (v >= b) break;
          q = d + 1;
          end = q;
        }
        if (end != std::string::npos) {
          *base = b;
          return end;
        }
      }
    }
    if (!is_digit(src_[p])) return std::string::npos;
    *base = 10;
    if (src_[p] == '0') {
      size_t q = p + 1;
      while (q < src_.size()) {
        size_t d = src_[q] == '_' ? q + 1 : q;
        if (d < src_.size() && src_[d] == '0') {
          q = d + 1;
        } else {
          break;
        }
      }
      return q;
    }
    return match_digits(p);
  }

  // The value of `count` hex digits at `from` (inside a literal ending at `end`).
  int64_t hex_digits(size_t escape, size_t from, int count, size_t end) const {
    int64_t v = 0;
    for (int k = 0; k < count; ++k) {
      size_t at = from + static_cast<size_t>(k);
      int d = -1;
      if (at < end) {
        char c = src_[at];
        char lc = static_cast<char>(c | 0x20);
        if (is_digit(c)) {
          d = c - '0';
        } else if (lc >= 'a' && lc <= 'f') {
          d = lc - 'a' + 10;
        }
      }
      if (d < 0) fail_at(escape, "truncated escape sequence in string literal");
      v = v * 16 + d;
    }
    return v;
  }

  // Decodes the escape sequence at src_[i] == '\\' into out; returns the offset after it.
  size_t decode_escape(size_t i, size_t end, std::string& out) const {
    char n = src_[i + 1];
    switch (n) {
      case '\n':
        return i + 2;
      case '\\':
      case '\'':
      case '"':
        out.push_back(n);
        return i + 2;
      case 'a':
        out.push_back('\a');
        return i + 2;
      case 'b':
        out.push_back('\b');
        return i + 2;
      case 'f':
        out.push_back('\f');
        return i + 2;
      case 'n':
        out.push_back('\n');
        return i + 2;
      case 'r':
        out.push_back('\r');
        return i + 2;
      case 't':
        out.push_back('\t');
        return i + 2;
      case 'v':
        out.push_back('\v');
        return i + 2;
      case 'x':
        append_utf8(out, static_cast<char32_t>(hex_digits(i, i + 2, 2, end)));
        return i + 4;
      case 'u':
        append_utf8(out, static_cast<char32_t>(hex_digits(i, i + 2, 4, end)));
        return i + 6;
      case 'U': {
        int64_t v = hex_digits(i, i + 2, 8, end);
        if (v > 0x10FFFF) fail_at(i, "invalid \\U escape in string literal");
        append_utf8(out, static_cast<char32_t>(v));
        return i + 10;
      }
      case 'N':
        fail_at(i, "\\N{...} escapes are not supported");
      default:
        break;
    }
    if (n >= '0' && n <= '7') {
      int v = 0;
      size_t k = i + 1;
      for (; k < end && k < i + 4 && src_[k] >= '0' && src_[k] <= '7'; ++k) {
        v = v * 8 + (src_[k] - '0');
      }
      append_utf8(out, static_cast<char32_t>(v));
      return k;
    }
    if (static_cast<unsigned char>(n) >= 0x80) {
      // jinja2 turned the character into its \x/\u escape text before decoding, so the
      // backslash escapes nothing and the escape text stays.
      size_t at = i + 1;
      char32_t cp = next_code_point(src_, &at);
      char buf[16];
      if (cp < 0x100 || cp >= kRawByteBase) {
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp & 0xFF));
      } else if (cp < 0x10000) {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      } else {
        std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(cp));
      }
      out += buf;
      return at;
    }
    out.push_back('\\');
    out.push_back(n);
    return i + 2;
  }

  // Decodes a string literal body as Python's unicode-escape does after jinja2's
  // backslashreplace step.
  std::string decode_string(size_t start, size_t end) const {
    std::string out;
    size_t i = start;
    while (i < end) {
      if (src_[i] == '\\') {
        i = decode_escape(i, end, out);
      } else {
        out.push_back(src_[i++]);
      }
    }
    return out;
  }

  // A float or integer literal at p: emits it and returns the offset after it, or npos.
  size_t lex_number(size_t p) {
    int base = 10;
    size_t q;
    if ((q = match_float(p)) != std::string::npos) {
      std::string text;
      for (size_t k = p; k < q; ++k) {
        if (src_[k] != '_') text.push_back(src_[k]);
      }
      Token t;
      t.type = TokenType::kFloat;
      t.pos = pos_at(p);
      auto res = std::from_chars(text.data(), text.data() + text.size(), t.float_value);
      if (res.ec == std::errc::result_out_of_range) {
        t.float_value = std::strtod(text.c_str(), nullptr);  // inf or 0, as Python gives
      }
      tokens_.push_back(t);
      return q;
    }
    if (is_digit(src_[p]) && (q = match_integer(p, &base)) != std::string::npos) {
      std::string text;
      for (size_t k = (base == 10 ? p : p + 2); k < q; ++k) {
        if (src_[k] != '_') text.push_back(src_[k]);
      }
      Token t;
      t.type = TokenType::kInteger;
      t.pos = pos_at(p);
      auto res = std::from_chars(text.data(), text.data() + text.size(), t.int_value, base);
      if (res.ec != std::errc()) fail_at(p, "integer literal too large");
      tokens_.push_back(t);
      return q;
    }
    return std::string::npos;
  }

  void lex_expression(size_t tag, size_t p, bool is_block) {
    emit(is_block ? TokenType::kBlockBegin : TokenType::kVariableBegin, tag);
    std::vector<char> balance;
    size_t n = src_.size();
    while (true) {
      if (p >= n) {
        fail_at(tag, is_block ? "unclosed '{%' tag: missing '%}'" : "unclosed '{{': missing '}}'");
      }
      if (balance.empty()) {
        size_t end = std::string::npos;
        char sign = 0;
        if (is_block) {
          if (starts_with(p, "+%}") || starts_with(p, "-%}")) {
            sign = src_[p];
            end = p + 3;
          } else if (starts_with(p, "%}")) {
            end = p + 2;
          }
        } else if (starts_with(p, "-}}")) {
          sign = '-';
          end = p + 3;
        } else if (starts_with(p, "}}")) {
          end = p + 2;
        }
        if (end != std::string::npos) {
          emit(is_block ? TokenType::kBlockEnd : TokenType::kVariableEnd, p);
          if (is_block) {
            pos_ = after_block_end(end, sign);
          } else {
            pos_ = sign == '-' ? skip_space(end) : end;
          }
          line_starting_ = src_[pos_ - 1] == '\n';
          return;
        }
      }
      size_t q = skip_space(p);
      if (q != p) {
        p = q;
        continue;
      }
      char c = src_[p];
      if ((q = lex_number(p)) != std::string::npos) {
        p = q;
      } else if (is_name_start(c)) {
        q = p;
        while (q < n && is_name_char(src_[q])) ++q;
        emit(TokenType::kName, p, src_.substr(p, q - p));
        p = q;
      } else if (c == '\'' || c == '"') {
        q = p + 1;
        while (q < n && src_[q] != c) q += src_[q] == '\\' ? 2 : 1;
        if (q >= n) fail_at(p, "unterminated string literal");
        emit(TokenType::kString, p, decode_string(p + 1, q));
        p = q + 1;
      } else {
        p = lex_operator(p, balance);
      }
    }
  }

  size_t lex_operator(size_t p, std::vector<char>& balance) {
    static constexpr std::string_view kTwo[] = {"**", "//", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwo) {
      if (starts_with(p, op)) {
        emit(TokenType::kOperator, p, std::string(op));
        return p + 2;
      }
    }
    char c = src_[p];
    static constexpr std::string_view kOne = "+-/*%~[](){}><=.:|,;";
    if (kOne.find(c) == std::string_view::npos) {
      size_t next = p;
      std::string ch;
      append_utf8(ch, next_code_point(src_, &next));
      fail_at(p, "unexpected character " + py_repr(ch));
    }
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) fail_at(p, std::string("unexpected '") + c + "'");
      char expected = balance.back();
      balance.pop_back();
      if (expected != c) {
        fail_at(p, std::string("unexpected '") + c + "', expected '" + expected + "'");
      }
    }
    emit(TokenType::kOperator, p, std::string(1, c));
    return p + 1;
  }

  std::string src_;
  LexOptions options_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  mutable size_t cached_line_ = 0;
  mutable size_t cached_offset_ = 0;
  mutable int cached_col_ = 1;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexOptions& options) {
  Lexer lexer(normalize_newlines(source, options.keep_trailing_newline), options);
  return lexer.run();
}

}  // namespace pagoda::jinja
