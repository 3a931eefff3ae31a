// pagoda list: the models a folder holds (what `serve --models-dir` would serve); pagoda ps:
// the models a running server has loaded.
#include <httplib.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "bench/serve_client.h"
#include "cli/commands.h"
#include "cli/format_util.h"
#include "cli/serve_model.h"
#include "core/error.h"

namespace pagoda::cli {
namespace {

std::string size_text(uint64_t bytes) {
  char buf[32];
  if (bytes >= (uint64_t{1} << 30)) {
    std::snprintf(buf, sizeof buf, "%.1f GiB", double(bytes) / double(uint64_t{1} << 30));
  } else {
    std::snprintf(buf, sizeof buf, "%.0f MiB", double(bytes) / double(uint64_t{1} << 20));
  }
  return buf;
}

std::string params_text(uint64_t n) {
  char buf[32];
  if (n >= 1000000000ull) {
    std::snprintf(buf, sizeof buf, "%.1fB", double(n) / 1e9);
  } else if (n >= 1000000ull) {
    std::snprintf(buf, sizeof buf, "%.0fM", double(n) / 1e6);
  } else {
    std::snprintf(buf, sizeof buf, "%.0fK", double(n) / 1e3);
  }
  return buf;
}

// The default folder: $PAGODA_MODELS_DIR, else ./models (where scripts/setup puts them).
std::string default_models_dir() {
  const char* env = std::getenv("PAGODA_MODELS_DIR");
  return env != nullptr && *env != '\0' ? env : "models";
}

}  // namespace

Action add_list(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("list", "List the models in a folder (what serve --models-dir serves)");
  cmd->add_option("--models-dir", *dir,
                  "The folder (default: $PAGODA_MODELS_DIR, else ./models)");
  return [dir] {
    ServeOptions o;
    o.models_dir = dir->empty() ? default_models_dir() : *dir;
    const std::vector<server::ModelSpec> specs = model_specs(o);
    std::printf("%-32s %-10s %-8s %-8s %-10s %s\n", "NAME", "ARCH", "PARAMS", "QUANT", "SIZE",
                "MODIFIED");
    for (const server::ModelSpec& s : specs) {
      const server::ModelDescription& d = s.description;
      std::printf("%-32s %-10s %-8s %-8s %-10s %s\n", s.id.c_str(),
                  d.architecture.empty() ? "?" : d.architecture.c_str(),
                  d.num_parameters ? params_text(d.num_parameters).c_str() : "?",
                  d.quantization.empty() ? "?" : d.quantization.c_str(),
                  size_text(d.size_bytes).c_str(), d.modified_at.c_str());
    }
    return 0;
  };
}

Action add_ps(CLI::App& app) {
  auto url = std::make_shared<std::string>("http://127.0.0.1:8080");
  auto key = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("ps", "List the models a running pagoda serve has loaded");
  cmd->add_option("--url", *url, "The server")->capture_default_str();
  cmd->add_option("--api-key", *key, "The server's API key, if it has one");
  return [url, key] {
    const bench::ServerUrl u = bench::parse_server_url(*url);
    httplib::Client client(u.origin);
    client.set_connection_timeout(5);
    client.set_read_timeout(30);
    httplib::Headers headers;
    if (!key->empty()) headers.emplace("Authorization", "Bearer " + *key);
    const httplib::Result r = client.Get(u.prefix + "/v1/models", headers);
    if (!r) fail("cannot reach ", *url, ": ", httplib::to_string(r.error()));
    if (r->status != 200) fail(*url, "/v1/models: HTTP ", r->status, ": ", r->body);
    const nlohmann::json list = nlohmann::json::parse(r->body, nullptr, false);
    if (!list.is_object() || !list.contains("data") || !list["data"].is_array()) {
      fail(*url, "/v1/models: not a model list");
    }
    std::printf("%-32s %-8s %s\n", "NAME", "STATE", "CONTEXT");
    for (const nlohmann::json& m : list["data"]) {
      if (!m.is_object() || !m.contains("id")) continue;
      // A server of one model says no state: its model is loaded.
      const std::string state = m.value("state", std::string("loaded"));
      if (state == "on disk" || m.contains("parent")) continue;
      std::printf("%-32s %-8s %s\n", m["id"].get<std::string>().c_str(), state.c_str(),
                  m.contains("max_model_len") ? m["max_model_len"].dump().c_str() : "-");
    }
    return 0;
  };
}

}  // namespace pagoda::cli
