// Errors as the OpenAI API returns them: an HTTP status and
// {"error": {"message", "type", "param", "code"}}. Handlers throw ApiError; the server turns it
// into the response. Anything else a handler throws becomes a 500 of type "server_error".
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace pagoda::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, std::string message, std::string param = "",
           std::string code = "")
      : std::runtime_error(message),
        status_(status),
        type_(std::move(type)),
        param_(std::move(param)),
        code_(std::move(code)) {}

  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  // Seconds a client should wait before retrying (the Retry-After header); 0: none.
  int retry_after_s() const { return retry_after_s_; }
  ApiError& with_retry_after(int seconds) {
    retry_after_s_ = seconds;
    return *this;
  }

  nlohmann::json to_json() const {
    auto null_if_empty = [](const std::string& s) {
      return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s);
    };
    return {{"error",
             {{"message", what()},
              {"type", type_},
              {"param", null_if_empty(param_)},
              {"code", null_if_empty(code_)}}}};
  }

 private:
  int status_;
  std::string type_, param_, code_;
  int retry_after_s_ = 0;
};

// 400 naming the parameter: "invalid_request_error".
inline ApiError bad_param(const std::string& param, const std::string& message) {
  return ApiError(400, "invalid_request_error", message, param);
}

}  // namespace pagoda::server
