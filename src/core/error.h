// Error reporting: every failure that reaches a user is one line naming what was wrong.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace pagoda {

// Thrown for bad input (files, arguments, requests) and for failed checks. The message is a
// complete one-line sentence meant for the user.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Concatenates anything streamable; keeps error sites to one line.
template <typename... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

template <typename... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(str_cat(std::forward<Args>(args)...));
}

// Internal invariant; a failure is a bug in pagoda, not in the input.
#define PAGODA_CHECK(cond)                                                                    \
  do {                                                                                        \
    if (!(cond)) ::pagoda::fail("internal check failed: " #cond " at ", __FILE__, ":", __LINE__); \
  } while (0)

}  // namespace pagoda
