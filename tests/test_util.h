// Helpers shared by the C++ tests: where ../shared is, and reading files from it.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace pagoda::test {

// The shared folder beside the checkout ($PAGODA_SHARED overrides); nullopt when absent.
std::optional<std::string> shared_dir();

// Path of a file under ../shared, or skips the current test loudly when ../shared is absent.
#define PAGODA_SHARED_OR_SKIP(var, relative)                                                   \
  auto var##_dir = ::pagoda::test::shared_dir();                                               \
  if (!var##_dir) GTEST_SKIP() << "*** ../shared is absent: SKIPPING a test on real data ***"; \
  std::string var = *var##_dir + "/" + (relative)

// A fresh temporary directory for the calling test.
std::string temp_dir();

}  // namespace pagoda::test
