// ChatTemplate: parsing at construction, JSON context conversion, rendering and the conversion of
// interpreter errors into one-line pagoda::Error messages.
#include "template/chat_template.h"

#include <algorithm>
#include <exception>
#include <new>

#include "core/error.h"
#include "template/evaluator.h"
#include "template/lexer.h"
#include "template/parser.h"

namespace pagoda {
namespace {

using jinja::Dict;
using jinja::RenderError;
using jinja::Value;

// Block nesting the parser accepts whatever max_depth says: keeps parser recursion shallow.
constexpr int kMaxBlockNesting = 256;

template <typename Json>
Value from_json(const Json& j, int depth) {
  if (depth > jinja::kMaxValueDepth) {
    jinja::raise("context nested too deeply (more than ", jinja::kMaxValueDepth, " levels)");
  }
  switch (j.type()) {
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::number(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value::number(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value::string(j.template get_ref<const std::string&>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json(item, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      auto d = std::make_shared<Dict>();
      for (auto it = j.begin(); it != j.end(); ++it) {
        d->set(Value::string(it.key()), from_json(it.value(), depth + 1));
      }
      return Value::dict(std::move(d));
    }
    case nlohmann::json::value_t::binary:
      break;
  }
  jinja::raise("binary JSON values are not supported in a template context");
}

std::string where(const RenderError& e) {
  if (!e.has_pos()) return "chat template: ";
  return str_cat("chat template ", e.pos().line, ":", e.pos().col, ": ");
}

// Runs f, turning every failure into a pagoda::Error.
template <typename F>
auto guarded(const char* kind, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const RenderError& e) {
    fail(where(e), kind, e.message());
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    fail("chat template: out of memory");
  } catch (const std::exception& e) {
    fail("chat template: internal error: ", e.what());
  }
}

template <typename Json>
std::string render_json(const std::vector<jinja::Stmt>& body, const TemplateLimits& limits,
                        const TemplateOptions& options, const Json& context) {
  return guarded("", [&] {
    if (!context.is_object() && !context.is_null()) {
      jinja::raise("the template context must be a JSON object");
    }
    jinja::EvalSettings settings;
    settings.max_steps = limits.max_steps;
    settings.max_output_bytes = std::max<int64_t>(limits.max_output_bytes, 0);
    settings.max_depth = limits.max_depth;
    settings.now_unix = options.now_unix;
    auto root = std::make_shared<jinja::Scope>(nullptr);
    for (auto it = context.begin(); it != context.end(); ++it) {
      root->vars[it.key()] = from_json(it.value(), 1);
    }
    jinja::Evaluator evaluator(settings);
    return evaluator.render(body, root);
  });
}

template <typename Json>
Json apply_context(const Json& messages, bool add_generation_prompt, const std::string& bos_token,
                   const std::string& eos_token, const Json& extra) {
  if (!extra.is_object()) fail("chat template: `extra` must be a JSON object");
  Json context = extra;
  if (!context.contains("tools")) context["tools"] = nullptr;
  if (!context.contains("documents")) context["documents"] = nullptr;
  context["messages"] = messages;
  context["add_generation_prompt"] = add_generation_prompt;
  context["bos_token"] = bos_token;
  context["eos_token"] = eos_token;
  return context;
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source, TemplateLimits limits, TemplateOptions options)
    : source_(std::move(source)), limits_(limits), options_(options) {
  body_ = guarded("syntax error: ", [&] {
    jinja::LexOptions lex;
    lex.trim_blocks = options_.trim_blocks;
    lex.lstrip_blocks = options_.lstrip_blocks;
    lex.keep_trailing_newline = options_.keep_trailing_newline;
    int nesting = std::clamp(limits_.max_depth, 1, kMaxBlockNesting);
    return std::make_shared<const std::vector<jinja::Stmt>>(
        jinja::parse_template(jinja::tokenize(source_, lex), nesting));
  });
}

std::string ChatTemplate::apply(const nlohmann::json& messages, bool add_generation_prompt,
                                const std::string& bos_token, const std::string& eos_token,
                                const nlohmann::json& extra) const {
  return render(apply_context(messages, add_generation_prompt, bos_token, eos_token, extra));
}

std::string ChatTemplate::apply_ordered(const nlohmann::ordered_json& messages,
                                        bool add_generation_prompt, const std::string& bos_token,
                                        const std::string& eos_token,
                                        const nlohmann::ordered_json& extra) const {
  return render_ordered(
      apply_context(messages, add_generation_prompt, bos_token, eos_token, extra));
}

std::string ChatTemplate::render(const nlohmann::json& context) const {
  return render_json(*body_, limits_, options_, context);
}

std::string ChatTemplate::render_ordered(const nlohmann::ordered_json& context) const {
  return render_json(*body_, limits_, options_, context);
}

}  // namespace pagoda
