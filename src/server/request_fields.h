// Typed readers of a request body's fields. Each error is a 400 naming the field (ApiError).
#pragma once

#include <cstdint>

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

}  // namespace pagoda::server
