#include "server/openai_output.h"

#include "core/error.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "server/api_error.h"
#include "server/request_fields.h"

namespace pagoda::server {

using nlohmann::json;
using nlohmann::ordered_json;

// response_format (json_object, json_schema), grammar (GBNF) or regex: at most one, kept as
// the source of the request's grammar (the server compiles it).
void parse_structured_output(const json& body, const ModelContext& model,
                             const std::string& raw_body, ApiRequest& r) {
  GrammarCompiler::Source source;
  std::string param;
  auto take = [&](const char* name) {
    if (!param.empty()) {
      throw bad_param(name, std::string("'") + name + "' and '" + param +
                                "' both constrain the output; give one");
    }
    param = name;
  };
  if (const json* rf = field(body, "response_format")) {
    const json* type = rf->is_object() ? field(*rf, "type") : nullptr;
    if (type == nullptr || !type->is_string()) {
      throw bad_param("response_format", "'response_format' must be an object with a 'type'");
    }
    const std::string t = type->get<std::string>();
    if (t == "json_object") {
      take("response_format");
      source = [](GrammarBudget&) { return json_object_gbnf(); };
    } else if (t == "json_schema") {
      take("response_format");
      const json* js = field(*rf, "json_schema");
      if (js == nullptr || !js->is_object() || field(*js, "schema") == nullptr) {
        throw bad_param("response_format",
                        "'response_format.json_schema' must be an object with a 'schema'");
      }
      // The schema again, in key order: properties are generated in the order written.
      const ordered_json ordered = raw_body.empty() ? ordered_json::parse(body.dump())
                                                    : ordered_json::parse(raw_body);
      source = [schema = ordered["response_format"]["json_schema"]["schema"]](
                   GrammarBudget& budget) { return json_schema_to_gbnf(schema, &budget); };
    } else if (t != "text") {
      throw bad_param("response_format", "'response_format.type' must be text, json_object or "
                                         "json_schema, got '" + t + "'");
    }
  }
  if (const json* g = field(body, "grammar")) {
    take("grammar");
    if (!g->is_string()) throw bad_param("grammar", "'grammar' must be GBNF text");
    source = [text = g->get<std::string>()](GrammarBudget&) { return text; };
  }
  if (const json* re = field(body, "regex")) {
    take("regex");
    if (!re->is_string()) throw bad_param("regex", "'regex' must be a string");
    source = [text = re->get<std::string>()](GrammarBudget& budget) {
      std::string gbnf = regex_to_gbnf(text, "root");
      budget.add_text(gbnf.size());
      return gbnf;
    };
  }
  if (param.empty()) return;
  if (!model.grammars) {
    throw bad_param(param, "this server cannot constrain output (the model has no vocabulary)");
  }
  r.grammar_source = std::move(source);
  r.grammar_param = param;
}

// tools, tool_choice, parallel_tool_calls: the tools the output is parsed for, what the template
// gets (the tools, or a system message describing them), and for tool_choice "required" or a
// named function, the grammar that makes the output a call.
void parse_tools(const json& body, const ordered_json& ordered, const ModelContext& model,
                 ApiRequest& r, ordered_json& extra, ordered_json& messages) {
  const json* tools = field(body, "tools");
  const json* choice = field(body, "tool_choice");
  const bool parallel = bool_field(body, "parallel_tool_calls", true);  // checked even unused
  // An empty list is no tools, as templates read it (clients such as Ollama's always send one).
  if (tools != nullptr && tools->is_array() && tools->empty()) tools = nullptr;
  if (tools == nullptr) {
    if (choice != nullptr && !(choice->is_string() && *choice == "none")) {
      throw bad_param("tool_choice", "'tool_choice' needs 'tools'");
    }
    return;
  }
  if (!tools->is_array()) throw bad_param("tools", "'tools' must be a list");
  std::vector<ToolSpec> specs;
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& t = (*tools)[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    const json* fn = t.is_object() ? field(t, "function") : nullptr;
    const json* name = fn != nullptr && fn->is_object() ? field(*fn, "name") : nullptr;
    if (!t.is_object() || t.value("type", "function") != "function" || name == nullptr ||
        !name->is_string() || name->get<std::string>().empty()) {
      throw bad_param("tools", "'" + where + "' must be {\"type\": \"function\", \"function\": "
                               "{\"name\", \"description\", \"parameters\"}}");
    }
    ToolSpec spec;
    spec.name = name->get<std::string>();
    if (const json* d = field(*fn, "description"); d != nullptr && d->is_string()) {
      spec.description = d->get<std::string>();
    }
    const ordered_json& ofn = ordered["tools"][i]["function"];
    if (ofn.contains("parameters") && !ofn["parameters"].is_null()) {
      if (!ofn["parameters"].is_object()) {
        throw bad_param("tools", "'" + where + ".function.parameters' must be a JSON schema");
      }
      spec.parameters = ofn["parameters"];
    }
    specs.push_back(std::move(spec));
  }
  std::string mode = "auto", only;
  if (choice != nullptr) {
    if (choice->is_string()) {
      mode = choice->get<std::string>();
      if (mode != "none" && mode != "auto" && mode != "required") {
        throw bad_param("tool_choice", "'tool_choice' must be none, auto, required or "
                                       "{\"type\": \"function\", \"function\": {\"name\"}}");
      }
    } else {
      const json* fn = choice->is_object() ? field(*choice, "function") : nullptr;
      const json* n = fn != nullptr && fn->is_object() ? field(*fn, "name") : nullptr;
      if (n == nullptr || !n->is_string()) {
        throw bad_param("tool_choice", "'tool_choice' must be none, auto, required or "
                                       "{\"type\": \"function\", \"function\": {\"name\"}}");
      }
      only = n->get<std::string>();
      bool found = false;
      for (const ToolSpec& s : specs) found = found || s.name == only;
      if (!found) throw bad_param("tool_choice", "'tool_choice' names '" + only + "', which is not in 'tools'");
      mode = "required";
    }
  }
  if (mode == "none") return;
  if (model.template_renders_tools) {
    extra["tools"] = ordered["tools"];
    // The description is optional in the API; a template that prints it unguarded (gpt-oss's)
    // gets "" for a function without one, as llama.cpp gives every template.
    if (model.template_traits.reads_tool_description) {
      for (ordered_json& t : extra["tools"]) {
        if (!t["function"].contains("description")) t["function"]["description"] = "";
      }
    }
  } else {
    // The template knows nothing of tools: a system message tells the model about them.
    const std::string prompt = tools_system_prompt(specs);
    if (!messages.empty() && messages[0].value("role", "") == "system") {
      messages[0]["content"] = messages[0].value("content", "") + "\n\n" + prompt;
    } else {
      messages.insert(messages.begin(), ordered_json{{"role", "system"}, {"content", prompt}});
    }
  }
  r.tools = std::move(specs);
  r.tool_format = model.tool_format;
  if (mode == "required") {
    if (r.grammar_source) {
      throw bad_param("tool_choice", "'tool_choice' " + (only.empty() ? std::string("required") : "naming a function") +
                                         " and a response_format, grammar or regex both constrain the output");
    }
    if (!model.grammars) throw bad_param("tool_choice", "this server cannot constrain output");
    r.grammar_source = [format = r.tool_format, tools = r.tools, only,
                        parallel](GrammarBudget& budget) {
      return tool_call_gbnf(format, tools, only, parallel, &budget);
    };
    r.grammar_param = "tools";
  }
}

}  // namespace pagoda::server
