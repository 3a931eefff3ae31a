#include "server/request_fields.h"

#include <limits>
#include <string>

#include "server/api_error.h"

namespace pagoda::server {

using nlohmann::json;

const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

namespace {

std::string range_text(double lo, double hi) {
  // Appended piece by piece: "[" + std::string&& makes GCC 12 warn (-Wrestrict) once inlined.
  std::string text = "[";
  text += json(lo).dump();
  text += ", ";
  text += json(hi).dump();
  text += "]";
  return text;
}

}  // namespace

double number_field(const json& body, const char* name, double fallback, double lo, double hi) {
  const json* v = field(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_number()) throw bad_param(name, std::string("'") + name + "' must be a number");
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) {
    throw bad_param(name, std::string("'") + name + "' must be in " + range_text(lo, hi) +
                              ", got " + v->dump());
  }
  return x;
}

int64_t int_field(const json& body, const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_number_integer()) {
    throw bad_param(name, std::string("'") + name + "' must be an integer");
  }
  // An unsigned value above int64's range arrives as a huge unsigned: out of range either way.
  const bool too_big = v->is_number_unsigned() &&
                       v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  const int64_t x = too_big ? std::numeric_limits<int64_t>::max() : v->get<int64_t>();
  if (too_big || x < lo || x > hi) {
    throw bad_param(name, std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " +
                              std::to_string(hi) + "], got " + v->dump());
  }
  return x;
}

bool bool_field(const json& body, const char* name, bool fallback) {
  const json* v = field(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) throw bad_param(name, std::string("'") + name + "' must be a boolean");
  return v->get<bool>();
}

void refuse_unknown_keys(const json& object, const std::set<std::string>& known,
                         const std::string& where, const std::string& tail) {
  for (const auto& [key, value] : object.items()) {
    if (known.count(key) == 0 && !value.is_null()) {
      const std::string name = where.empty() ? key : where + "." + key;
      throw bad_param(name, "'" + name + "' is not supported by this server" + tail);
    }
  }
}

}  // namespace pagoda::server
