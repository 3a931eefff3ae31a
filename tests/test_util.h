// Helpers shared by the C++ tests: where ../shared is, and reading files from it.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
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

// Chi-squared tests for the statistical tests of samplers: the p-value of a statistic with `df`
// degrees of freedom (the regularized upper incomplete gamma function Q(df / 2, stat / 2));
// two samples of counts from one distribution (homogeneity); a sample against known
// probabilities (goodness of fit). Cells whose expected count is below 5 are pooled.
double chi_squared_p_value(double statistic, double df);
double chi_squared_homogeneity_p(const std::map<int32_t, int64_t>& a,
                                 const std::map<int32_t, int64_t>& b);
double chi_squared_fit_p(const std::map<int32_t, int64_t>& observed,
                         const std::map<int32_t, double>& probs);

}  // namespace pagoda::test
