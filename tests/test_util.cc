#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>
#include <filesystem>

namespace pagoda::test {

std::optional<std::string> shared_dir() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("PAGODA_SHARED")) {
    if (fs::is_directory(env)) return std::string(env);
  }
  fs::path p = fs::path(PAGODA_SOURCE_DIR).parent_path() / "shared";
  if (fs::is_directory(p)) return p.string();
  return std::nullopt;
}

std::string temp_dir() {
  namespace fs = std::filesystem;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path p = fs::temp_directory_path() / "pagoda-tests" /
               (std::string(info->test_suite_name()) + "." + info->name());
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

namespace {

// Q(a, x): series below a + 1, a continued fraction above (Lentz's method).
double gamma_q(double a, double x) {
  if (x <= 0) return 1.0;
  const double log_prefix = a * std::log(x) - x - std::lgamma(a);
  if (x < a + 1) {
    double sum = 1.0 / a, term = sum;
    for (int n = 1; n < 10000; ++n) {
      term *= x / (a + n);
      sum += term;
      if (term < sum * 1e-16) break;
    }
    return std::max(0.0, 1.0 - sum * std::exp(log_prefix));
  }
  double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (std::fabs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < 1e-16) break;
  }
  return std::exp(log_prefix) * h;
}

}  // namespace

double chi_squared_p_value(double statistic, double df) {
  return df <= 0 ? 1.0 : gamma_q(df / 2, statistic / 2);
}

double chi_squared_homogeneity_p(const std::map<int32_t, int64_t>& a,
                                 const std::map<int32_t, int64_t>& b) {
  std::map<int32_t, std::pair<double, double>> both;
  double na = 0, nb = 0;
  for (const auto& [t, n] : a) {
    both[t].first += static_cast<double>(n);
    na += static_cast<double>(n);
  }
  for (const auto& [t, n] : b) {
    both[t].second += static_cast<double>(n);
    nb += static_cast<double>(n);
  }
  std::vector<std::pair<double, double>> cells;
  std::pair<double, double> pooled{0, 0};
  const double smaller = std::min(na, nb) / (na + nb);
  for (const auto& [t, c] : both) {
    if ((c.first + c.second) * smaller >= 5) {
      cells.push_back(c);
    } else {
      pooled.first += c.first;
      pooled.second += c.second;
    }
  }
  if (pooled.first + pooled.second > 0) cells.push_back(pooled);
  double stat = 0;
  for (const auto& [x, y] : cells) {
    const double ea = (x + y) * na / (na + nb), eb = (x + y) * nb / (na + nb);
    stat += (x - ea) * (x - ea) / ea + (y - eb) * (y - eb) / eb;
  }
  return chi_squared_p_value(stat, static_cast<double>(cells.size()) - 1);
}

double chi_squared_fit_p(const std::map<int32_t, int64_t>& observed,
                         const std::map<int32_t, double>& probs) {
  double n = 0;
  for (const auto& [t, c] : observed) n += static_cast<double>(c);
  double stat = 0, pooled_expected = 0, pooled_observed = 0;
  int cells = 0;
  for (const auto& [t, p] : probs) {
    const auto it = observed.find(t);
    const double o = it == observed.end() ? 0.0 : static_cast<double>(it->second);
    if (n * p >= 5) {
      stat += (o - n * p) * (o - n * p) / (n * p);
      ++cells;
    } else {
      pooled_expected += n * p;
      pooled_observed += o;
    }
  }
  // Tokens observed that the probabilities do not list have probability 0: any is a failure.
  for (const auto& [t, c] : observed) {
    if (!probs.count(t) && c > 0) return 0.0;
  }
  if (pooled_expected > 0) {
    stat += (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) /
            pooled_expected;
    ++cells;
  }
  return chi_squared_p_value(stat, cells - 1);
}

}  // namespace pagoda::test
