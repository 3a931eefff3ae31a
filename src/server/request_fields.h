// Typed readers of a request body's fields. Each error is a 400 naming the field (ApiError).
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

namespace pagoda::server {

// The field, or nullptr when absent or null (OpenAI treats null as "not given").
const nlohmann::json* field(const nlohmann::json& body, const char* name);
// A number in [lo, hi]; `fallback` when absent.
double number_field(const nlohmann::json& body, const char* name, double fallback, double lo,
                    double hi);
// An integer in [lo, hi]; `fallback` when absent.
int64_t int_field(const nlohmann::json& body, const char* name, int64_t fallback, int64_t lo,
                  int64_t hi);
// A boolean; `fallback` when absent.
bool bool_field(const nlohmann::json& body, const char* name, bool fallback);
// Refuses (400) the first key of `object` outside `known`, naming it as `where`.key: "'where.key'
// is not supported by this server" and `tail`. A null value counts as not given.
void refuse_unknown_keys(const nlohmann::json& object, const std::set<std::string>& known,
                         const std::string& where, const std::string& tail = "");

}  // namespace pagoda::server
