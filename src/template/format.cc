// String formatting as Python does it: printf-style `fmt % args` (also the `format` filter) and
// str.format with the format-spec mini-language ([[fill]align][sign][#][0][width][,][.prec][type]).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "template/evaluator.h"
#include "template/text.h"

namespace pagoda::jinja {
namespace {

constexpr int64_t kMaxPrecision = 1000;

struct Spec {
  std::string fill = " ";
  char align = 0;  // < > ^ =
  char sign = '-';
  bool alternate = false;
  bool zero = false;
  int64_t width = 0;
  char grouping = 0;
  int64_t precision = -1;
  char type = 0;
};

std::string pad(Evaluator& ev, const std::string& body, const Spec& spec, char default_align,
                size_t sign_len) {
  int64_t len = static_cast<int64_t>(num_code_points(body));
  if (spec.width <= len) return body;
  ev.check_size(static_cast<size_t>(spec.width) * spec.fill.size());
  int64_t n = spec.width - len;
  char align = spec.align != 0 ? spec.align : default_align;
  auto repeat = [&](int64_t k) {
    std::string out;
    for (int64_t i = 0; i < k; ++i) out += spec.fill;
    return out;
  };
  switch (align) {
    case '<':
      return body + repeat(n);
    case '^':
      return repeat(n / 2) + body + repeat(n - n / 2);
    case '=':
      return body.substr(0, sign_len) + repeat(n) + body.substr(sign_len);
    default:
      return repeat(n) + body;
  }
}

std::string group_digits(const std::string& digits, char sep, int every) {
  std::string out;
  int count = 0;
  for (size_t k = digits.size(); k-- > 0;) {
    if (count == every) {
      out.push_back(sep);
      count = 0;
    }
    out.push_back(digits[k]);
    ++count;
  }
  return std::string(out.rbegin(), out.rend());
}

std::string unsigned_digits(uint64_t u, int base, bool upper) {
  if (u == 0) return "0";
  std::string out;
  const char* digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  while (u > 0) {
    out.push_back(digits[u % static_cast<uint64_t>(base)]);
    u /= static_cast<uint64_t>(base);
  }
  return std::string(out.rbegin(), out.rend());
}

std::string c_float(double d, const std::string& flags, int64_t precision, char type) {
  if (precision > kMaxPrecision) raise("ValueError: precision too big");
  std::string fmt = "%" + flags + "." + std::to_string(precision < 0 ? 6 : precision) + type;
  int n = std::snprintf(nullptr, 0, fmt.c_str(), d);
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), fmt.c_str(), d);
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string char_of(const Value& v, const char* what) {
  if (v.is_integral()) {
    if (v.i() < 0 || v.i() > 0x10FFFF)
      raise("OverflowError: ", what, " arg not in range(0x110000)");
    std::string out;
    append_utf8(out, static_cast<char32_t>(v.i()));
    return out;
  }
  if (v.is_string() && num_code_points(v.s()) == 1) return v.s();
  raise("TypeError: ", what, " requires int or char");
}

// ---- printf-style ----

std::string percent_one(Evaluator& ev, const Value& v, const std::string& flags, int64_t width,
                        int64_t precision, char conv) {
  bool left = flags.find('-') != std::string::npos;
  bool zero = flags.find('0') != std::string::npos && !left;
  std::string body;
  size_t sign_len = 0;
  if (conv == 's' || conv == 'r' || conv == 'a') {
    body = conv == 's' ? to_str(v) : repr(v);
    if (precision >= 0) {
      std::u32string cps = decode_utf8(body);
      if (static_cast<int64_t>(cps.size()) > precision) cps.resize(static_cast<size_t>(precision));
      body = encode_utf8(cps);
    }
    zero = false;
  } else if (conv == 'c') {
    body = char_of(v, "%c");
    zero = false;
  } else if (conv == 'd' || conv == 'i' || conv == 'u' || conv == 'o' || conv == 'x' ||
             conv == 'X') {
    int64_t n;
    if (v.is_integral()) {
      n = v.i();
    } else if (v.is_float() && (conv == 'd' || conv == 'i' || conv == 'u')) {
      if (!std::isfinite(v.f()) || std::fabs(v.f()) >= 9.2e18) {
        raise("OverflowError: cannot convert float to integer");
      }
      n = static_cast<int64_t>(v.f());
    } else {
      raise("TypeError: %", std::string(1, conv),
            " format: ", v.is_float() ? "an integer" : "a real number", " is required, not ",
            type_name(v));
    }
    uint64_t u = n < 0 ? 0 - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
    int base = conv == 'o' ? 8 : (conv == 'x' || conv == 'X') ? 16 : 10;
    std::string digits = unsigned_digits(u, base, conv == 'X');
    if (precision > kMaxPrecision) raise("ValueError: precision too big");
    if (precision > static_cast<int64_t>(digits.size())) {
      digits = std::string(static_cast<size_t>(precision) - digits.size(), '0') + digits;
    }
    std::string prefix = n < 0                                  ? "-"
                         : flags.find('+') != std::string::npos ? "+"
                         : flags.find(' ') != std::string::npos ? " "
                                                                : "";
    if (flags.find('#') != std::string::npos && base != 10) {
      prefix += base == 8 ? "0o" : (conv == 'X' ? "0X" : "0x");
    }
    body = prefix + digits;
    sign_len = prefix.size();
  } else if (std::string("eEfFgG").find(conv) != std::string::npos) {
    if (!v.is_number()) raise("TypeError: must be real number, not ", type_name(v));
    std::string cflags;
    for (char f : flags) {
      if (f != '-' && f != '0') cflags.push_back(f);
    }
    body = c_float(v.f(), cflags, precision, conv);
    sign_len = !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ') ? 1 : 0;
    if (!std::isfinite(v.f())) zero = false;
  } else {
    raise("ValueError: unsupported format character '", std::string(1, conv), "'");
  }
  Spec spec;
  spec.width = width;
  spec.align = left ? '<' : zero ? '=' : '>';
  spec.fill = zero ? "0" : " ";
  return pad(ev, body, spec, '>', sign_len);
}

// The key of "%(key)s" starting at the '(' at *i (parentheses may nest); moves *i past it.
std::string percent_key(const std::string& fmt, size_t* i) {
  int depth = 1;
  size_t start = ++*i;
  while (*i < fmt.size() && depth > 0) {
    if (fmt[*i] == '(') ++depth;
    if (fmt[*i] == ')') --depth;
    ++*i;
  }
  if (depth > 0) raise("ValueError: incomplete format key");
  return fmt.substr(start, *i - 1 - start);
}

// ---- str.format ----

Spec parse_spec(const std::string& s) {
  Spec spec;
  std::u32string cps = decode_utf8(s);
  size_t i = 0;
  auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (cps.size() >= 2 && is_align(cps[1])) {
    spec.fill = encode_utf8(cps.substr(0, 1));
    spec.align = static_cast<char>(cps[1]);
    i = 2;
  } else if (!cps.empty() && is_align(cps[0])) {
    spec.align = static_cast<char>(cps[0]);
    i = 1;
  }
  if (i < cps.size() && (cps[i] == '+' || cps[i] == '-' || cps[i] == ' ')) {
    spec.sign = static_cast<char>(cps[i++]);
  }
  if (i < cps.size() && cps[i] == '#') {
    spec.alternate = true;
    ++i;
  }
  if (i < cps.size() && cps[i] == '0') {
    spec.zero = true;
    ++i;
  }
  auto number = [&]() {
    int64_t n = 0;
    while (i < cps.size() && cps[i] >= '0' && cps[i] <= '9') {
      n = n * 10 + (cps[i++] - '0');
      if (n > (int64_t{1} << 40)) raise("ValueError: Too many decimal digits in format string");
    }
    return n;
  };
  spec.width = number();
  if (i < cps.size() && (cps[i] == ',' || cps[i] == '_'))
    spec.grouping = static_cast<char>(cps[i++]);
  if (i < cps.size() && cps[i] == '.') {
    ++i;
    if (i >= cps.size() || cps[i] < '0' || cps[i] > '9')
      raise("ValueError: Format specifier missing precision");
    spec.precision = number();
  }
  if (i < cps.size()) spec.type = static_cast<char>(cps[i++]);
  if (i < cps.size()) raise("ValueError: Invalid format specifier '", s, "'");
  if (spec.zero && spec.align == 0) {
    spec.fill = "0";
    spec.align = '=';
  }
  return spec;
}

std::string format_value(Evaluator& ev, const Value& v, const std::string& spec_text) {
  if (spec_text.empty()) return to_str(v);
  Spec spec = parse_spec(spec_text);
  if (v.is_string()) {
    if (spec.type != 0 && spec.type != 's') {
      raise("ValueError: Unknown format code '", std::string(1, spec.type),
            "' for object of type 'str'");
    }
    if (spec.sign != '-') raise("ValueError: Sign not allowed in string format specifier");
    std::string body = v.s();
    if (spec.precision >= 0) {
      std::u32string cps = decode_utf8(body);
      if (static_cast<int64_t>(cps.size()) > spec.precision) cps.resize(spec.precision);
      body = encode_utf8(cps);
    }
    return pad(ev, body, spec, '<', 0);
  }
  if (!v.is_number()) {
    raise("TypeError: unsupported format string passed to ", type_name(v), ".__format__");
  }
  std::string sign_char = spec.sign == '+' ? "+" : spec.sign == ' ' ? " " : "";
  bool int_type = spec.type == 0 || std::string("dboxXcn").find(spec.type) != std::string::npos;
  if (v.is_integral() && int_type) {
    if (spec.type == 'c') return pad(ev, char_of(v, "%c"), spec, '<', 0);
    int64_t n = v.i();
    int base = spec.type == 'b'                         ? 2
               : spec.type == 'o'                       ? 8
               : (spec.type == 'x' || spec.type == 'X') ? 16
                                                        : 10;
    uint64_t u = n < 0 ? 0 - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
    std::string digits = unsigned_digits(u, base, spec.type == 'X');
    if (spec.grouping != 0) digits = group_digits(digits, spec.grouping, base == 10 ? 3 : 4);
    std::string prefix = n < 0 ? "-" : sign_char;
    if (spec.alternate && base != 10) {
      prefix += base == 2 ? "0b" : base == 8 ? "0o" : spec.type == 'X' ? "0X" : "0x";
    }
    return pad(ev, prefix + digits, spec, '>', prefix.size());
  }
  if (std::string("eEfFgGn%").find(spec.type) == std::string::npos && spec.type != 0) {
    raise("ValueError: Unknown format code '", std::string(1, spec.type), "' for object of type '",
          type_name(v), "'");
  }
  double d = v.f();
  std::string flags = spec.alternate ? "#" : "";
  if (spec.sign == '+' || spec.sign == ' ') flags += spec.sign;
  std::string body;
  if (spec.type == '%') {
    body = c_float(d * 100, flags, spec.precision, 'f') + "%";
  } else if (spec.type == 0 || spec.type == 'n') {
    if (spec.precision < 0 && spec.type == 0) {
      body = float_repr(d);
      if (d >= 0 && !sign_char.empty() && !std::isnan(d)) body = sign_char + body;
    } else {
      body = c_float(d, flags, spec.precision < 0 ? 6 : std::max<int64_t>(spec.precision, 1), 'g');
      if (spec.type == 0 && body.find_first_of(".en") == std::string::npos) body += ".0";
    }
  } else {
    body = c_float(d, flags, spec.precision, spec.type);
  }
  if (spec.grouping != 0) {
    size_t start = !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ') ? 1 : 0;
    size_t end = start;
    while (end < body.size() && body[end] >= '0' && body[end] <= '9') ++end;
    body = body.substr(0, start) + group_digits(body.substr(start, end - start), spec.grouping, 3) +
           body.substr(end);
  }
  size_t sign_len = !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ') ? 1 : 0;
  return pad(ev, body, spec, '>', sign_len);
}

}  // namespace

std::string percent_format(Evaluator& ev, const std::string& fmt, const Value& args) {
  std::vector<Value> positional;
  const Dict* mapping = nullptr;
  bool mapping_like = false;
  if (args.is_tuple()) {
    positional = args.list().items;
  } else {
    positional.push_back(args);
    if (args.is_dict()) mapping = &args.dict();
    // Python treats any object with __getitem__ (list, dict) as a mapping argument here: unused
    // arguments are then no error.
    mapping_like = args.is_dict() || args.is_list() || args.is_undefined();
  }
  size_t argidx = 0;
  auto next_arg = [&]() -> Value {
    if (argidx >= positional.size()) raise("TypeError: not enough arguments for format string");
    return positional[argidx++];
  };
  std::string out;
  size_t i = 0;
  while (i < fmt.size()) {
    char c = fmt[i++];
    if (c != '%') {
      out.push_back(c);
      continue;
    }
    std::optional<Value> keyed;
    if (i < fmt.size() && fmt[i] == '(') {
      if (mapping == nullptr) {
        raise("TypeError: ", mapping_like ? "list indices must be integers or slices, not str"
                                          : "format requires a mapping");
      }
      std::string key = percent_key(fmt, &i);
      const Value* v = mapping->find(std::string_view(key));
      if (v == nullptr) raise("KeyError: ", py_repr(key));
      keyed = *v;
    }
    std::string flags;
    while (i < fmt.size() && std::string("-+ #0").find(fmt[i]) != std::string::npos) {
      flags.push_back(fmt[i++]);
    }
    auto number = [&](int64_t fallback) {
      if (i < fmt.size() && fmt[i] == '*') {
        ++i;
        Value n = next_arg();
        if (!n.is_integral()) raise("TypeError: * wants int");
        return n.i();
      }
      if (i >= fmt.size() || fmt[i] < '0' || fmt[i] > '9') return fallback;
      int64_t n = 0;
      while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') {
        n = n * 10 + (fmt[i++] - '0');
        if (n > (int64_t{1} << 40)) raise("ValueError: width too big");
      }
      return n;
    };
    int64_t width = number(0);
    if (width < 0) {
      flags.push_back('-');
      width = -width;
    }
    int64_t precision = -1;
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      precision = number(0);
    }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) raise("ValueError: incomplete format");
    char conv = fmt[i++];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    Value v = keyed ? *keyed : next_arg();
    out += percent_one(ev, v, flags, width, precision, conv);
    ev.check_size(out.size());
  }
  if (argidx < positional.size() && !mapping_like) {
    raise("TypeError: not all arguments converted during string formatting");
  }
  return out;
}

namespace {

bool all_digits(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Automatic ({}) or manual ({0}) field numbering of one str.format call; mixing them is an error.
struct FieldNumbering {
  size_t next = 0;
  int mode = 0;  // 0 unknown, 1 automatic, 2 manual
};

// The argument a replacement field names ("", "0", "name"), then its .attr and [key] parts.
Value field_value(Evaluator& ev, const std::string& field, CallArgs& args, FieldNumbering* n) {
  size_t end = field.find_first_of(".[");
  std::string first = field.substr(0, end);
  Value v;
  if (first.empty() || all_digits(first)) {
    size_t index;
    if (first.empty()) {
      if (n->mode == 2) {
        raise(
            "ValueError: cannot switch from manual field specification to automatic field "
            "numbering");
      }
      n->mode = 1;
      index = n->next++;
    } else {
      if (n->mode == 1) {
        raise(
            "ValueError: cannot switch from automatic field numbering to manual field "
            "specification");
      }
      n->mode = 2;
      if (first.size() > 9) raise("ValueError: Too many decimal digits in format string");
      index = static_cast<size_t>(std::stoull(first));
    }
    if (index >= args.args.size()) {
      raise("IndexError: Replacement index ", index, " out of range for positional args tuple");
    }
    v = args.args[index];
  } else {
    bool found = false;
    for (const auto& [key, value] : args.kwargs) {
      if (key == first) {
        v = value;
        found = true;
      }
    }
    if (!found) raise("KeyError: ", py_repr(first));
  }
  size_t p = end;
  while (p != std::string::npos && p < field.size()) {
    if (field[p] == '.') {
      size_t q = field.find_first_of(".[", p + 1);
      std::string attr =
          field.substr(p + 1, q == std::string::npos ? std::string::npos : q - p - 1);
      if (attr.empty()) raise("ValueError: Empty attribute in format string");
      v = ev.getattr(v, attr);
      p = q;
      continue;
    }
    size_t q = field.find(']', p);
    if (q == std::string::npos) raise("ValueError: Missing ']' in format string");
    std::string key = field.substr(p + 1, q - p - 1);
    int64_t index = 0;
    bool is_int = !key.empty() && all_digits(key) && parse_py_int(key, 10, &index);
    v = ev.getitem(v, is_int ? Value::integer(index) : Value::string(key));
    p = q + 1;
    if (p < field.size() && field[p] != '.' && field[p] != '[') {
      raise("ValueError: Only '.' or '[' may follow ']' in format field specifier");
    }
  }
  return v;
}

std::string str_format_impl(Evaluator& ev, const std::string& fmt, CallArgs& args, int depth,
                            FieldNumbering* numbering) {
  if (depth > 1) raise("ValueError: Max string recursion exceeded");
  std::string out;
  size_t i = 0;
  while (i < fmt.size()) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out.push_back('}');
        i += 2;
        continue;
      }
      raise("ValueError: Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      ++i;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      i += 2;
      continue;
    }
    int depth = 1;
    size_t start = ++i;
    while (i < fmt.size() && depth > 0) {
      if (fmt[i] == '{') ++depth;
      if (fmt[i] == '}') --depth;
      ++i;
    }
    if (depth > 0) raise("ValueError: expected '}' before end of string");
    std::string field = fmt.substr(start, i - 1 - start);
    std::string spec;
    size_t colon = std::string::npos;
    size_t bang = std::string::npos;
    for (size_t k = 0; k < field.size(); ++k) {
      if (field[k] == '[') {
        while (k < field.size() && field[k] != ']') ++k;
      } else if (field[k] == '!' && bang == std::string::npos) {
        bang = k;
      } else if (field[k] == ':') {
        colon = k;
        break;
      }
    }
    if (colon != std::string::npos) spec = field.substr(colon + 1);
    std::string conv;
    size_t name_end = colon;
    if (bang != std::string::npos && bang < colon) {
      conv = field.substr(bang + 1, (colon == std::string::npos ? field.size() : colon) - bang - 1);
      name_end = bang;
    }
    if (spec.find('{') != std::string::npos) {
      CallArgs sub = args;
      spec = str_format_impl(ev, spec, sub, depth + 1, numbering);
    }
    Value v = field_value(ev, field.substr(0, name_end), args, numbering);
    if (conv == "r" || conv == "a") {
      v = Value::string(repr(v));
    } else if (conv == "s") {
      v = Value::string(to_str(v));
    } else if (!conv.empty()) {
      raise("ValueError: Unknown conversion specifier ", conv);
    }
    out += format_value(ev, v, spec);
    ev.check_size(out.size());
  }
  return out;
}

}  // namespace

std::string str_format(Evaluator& ev, const std::string& fmt, CallArgs& args) {
  FieldNumbering numbering;
  return str_format_impl(ev, fmt, args, 0, &numbering);
}

}  // namespace pagoda::jinja
