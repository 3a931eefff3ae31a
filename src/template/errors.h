// The interpreter's internal error: a message plus the template position it belongs to, which is
// filled in by the innermost node being evaluated. ChatTemplate turns it into a pagoda::Error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>

#include "core/error.h"

namespace pagoda::jinja {

struct Pos {
  int line = 0;
  int col = 0;
};

class RenderError : public std::exception {
 public:
  explicit RenderError(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }
  const std::string& message() const { return message_; }
  bool has_pos() const { return pos_.line > 0; }
  const Pos& pos() const { return pos_; }
  void set_pos(Pos pos) {
    if (!has_pos()) pos_ = pos;
  }

 private:
  std::string message_;
  Pos pos_;
};

// Native stack a parse or a render may use below where it started: recursion is refused past it
// with an error, whatever the frame sizes (optimized, debug or sanitizer builds), so hostile
// templates cannot overflow the stack of a thread that has 2 MiB or more (Linux threads get 8).
constexpr uintptr_t kMaxStackBytes = 1024 * 1024;

// Stack bytes used between `base` (an address taken earlier on this thread) and here.
inline uintptr_t stack_used_since(uintptr_t base) {
  uintptr_t here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  return base > here ? base - here : here - base;
}

inline uintptr_t stack_position() {
  return reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
}

template <typename... Args>
[[noreturn]] void raise(Args&&... args) {
  throw RenderError(str_cat(std::forward<Args>(args)...));
}

}  // namespace pagoda::jinja
