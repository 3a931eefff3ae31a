#include "test_util.h"

#include <cstdlib>
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

}  // namespace pagoda::test
