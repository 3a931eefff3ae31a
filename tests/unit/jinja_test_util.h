// Shared by the Jinja interpreter's tests: the error a template gives.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "template/chat_template.h"

namespace pagoda::test {

// The pagoda::Error message of parsing or rendering src, or "(no error)".
inline std::string jinja_error_of(const std::string& src,
                                  const nlohmann::json& ctx = nlohmann::json::object(),
                                  TemplateLimits limits = {}) {
  try {
    ChatTemplate(src, limits).render(ctx);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace pagoda::test
