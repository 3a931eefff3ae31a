// render_template: reads {"template": "...", "context": {...}} from stdin and prints what pagoda's
// chat template interpreter renders (or `error: ...` on stderr and exit 1). {"builtin": "chatml"}
// in place of "template" renders one of pagoda's own templates. Optional keys:
// "options" {trim_blocks, lstrip_blocks, keep_trailing_newline, now_unix} and "limits"
// {max_steps, max_output_bytes, max_depth}. Given a JSON array of such objects instead, it
// renders each and prints a JSON array of {"output": ...} or {"error": ...}, so a Python test can
// compare many cases with jinja2 in one process. Key order of the context is kept.
// `render_template --source NAME` prints the source of builtin template NAME.
#include <iostream>
#include <iterator>
#include <string>

#include "core/error.h"
#include "template/chat_template.h"

namespace {

using Json = nlohmann::ordered_json;

std::string render_case(const Json& c) {
  std::string source;
  if (c.is_object() && c.contains("builtin") && c["builtin"].is_string()) {
    source = std::string(pagoda::builtin_chat_template(c["builtin"].get<std::string>()));
    if (source.empty()) throw pagoda::Error("no builtin template named " + c["builtin"].dump());
  } else if (c.is_object() && c.contains("template") && c["template"].is_string()) {
    source = c["template"].get<std::string>();
  } else {
    throw pagoda::Error("input must be an object with a \"template\" or \"builtin\" string");
  }
  pagoda::TemplateLimits limits;
  pagoda::TemplateOptions options;
  if (c.contains("limits")) {
    const Json& l = c["limits"];
    limits.max_steps = l.value("max_steps", limits.max_steps);
    limits.max_output_bytes = l.value("max_output_bytes", limits.max_output_bytes);
    limits.max_depth = l.value("max_depth", limits.max_depth);
  }
  if (c.contains("options")) {
    const Json& o = c["options"];
    options.trim_blocks = o.value("trim_blocks", options.trim_blocks);
    options.lstrip_blocks = o.value("lstrip_blocks", options.lstrip_blocks);
    options.keep_trailing_newline = o.value("keep_trailing_newline", options.keep_trailing_newline);
    options.now_unix = o.value("now_unix", options.now_unix);
  }
  pagoda::ChatTemplate tmpl(source, limits, options);
  return tmpl.render_ordered(c.value("context", Json::object()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--source") {
    std::string_view source = pagoda::builtin_chat_template(argv[2]);
    if (source.empty()) {
      std::cerr << "error: no builtin template named '" << argv[2] << "'\n";
      return 1;
    }
    std::cout << source;
    return 0;
  }
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  Json request;
  try {
    request = Json::parse(input);
  } catch (const std::exception& e) {
    std::cerr << "error: input is not JSON: " << e.what() << "\n";
    return 1;
  }
  if (request.is_array()) {
    Json results = Json::array();
    for (const Json& c : request) {
      Json r = Json::object();
      try {
        r["output"] = render_case(c);
      } catch (const std::exception& e) {
        r["error"] = e.what();
      }
      results.push_back(std::move(r));
    }
    std::cout << results.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return 0;
  }
  try {
    std::cout << render_case(request);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
