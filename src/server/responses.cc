// OpenAI response shapes (see responses.h).
#include "server/responses.h"

namespace pagoda::server {
namespace {

using json = nlohmann::ordered_json;

const char* object_name(const ApiRequest& r, bool chunk) {
  if (r.endpoint == Endpoint::kChat) return chunk ? "chat.completion.chunk" : "chat.completion";
  return "text_completion";
}

json head_json(const ResponseHead& head, const ApiRequest& r, bool chunk) {
  return {{"id", head.id}, {"object", object_name(r, chunk)}, {"created", head.created},
          {"model", head.model}};
}

json finish_json(const std::string& reason) {
  return reason.empty() ? json(nullptr) : json(reason);
}

json bytes_json(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace

std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  // cached_tokens: prompt tokens served from the prefix cache, as OpenAI's API reports them.
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

namespace {

// The usage of a finished generation; with speculative proposals, how many were made and
// accepted (an extension: OpenAI clients ignore fields they do not know).
json usage_of(const Generation& g) {
  json usage = usage_json(g.num_prompt_tokens(), g.num_completion_tokens(), g.num_cached_tokens());
  if (g.num_proposed() > 0) {
    usage["speculative"] = {{"proposed_tokens", g.num_proposed()},
                            {"accepted_tokens", g.num_accepted()},
                            {"verify_steps", g.num_verify_steps()}};
  }
  return usage;
}

}  // namespace

json completion_logprobs(const Tokenizer& tokenizer, const std::vector<TokenLogprob>& lp,
                         size_t offset) {
  json tokens = json::array(), values = json::array(), tops = json::array(),
       offsets = json::array();
  for (const TokenLogprob& t : lp) {
    const std::string text = tokenizer.token_to_bytes(t.token);
    tokens.push_back(text);
    values.push_back(t.logprob);
    json top = json::object();
    for (const auto& [id, value] : t.top) top[tokenizer.token_to_bytes(id)] = value;
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += text.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops},
          {"text_offset", offsets}};
}

json chat_logprobs(const Tokenizer& tokenizer, const std::vector<TokenLogprob>& lp) {
  json content = json::array();
  for (const TokenLogprob& t : lp) {
    const std::string text = tokenizer.token_to_bytes(t.token);
    json top = json::array();
    for (const auto& [id, value] : t.top) {
      const std::string alt = tokenizer.token_to_bytes(id);
      top.push_back({{"token", alt}, {"logprob", value}, {"bytes", bytes_json(alt)}});
    }
    content.push_back(
        {{"token", text}, {"logprob", t.logprob}, {"bytes", bytes_json(text)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json echoed_logprobs(const Tokenizer& tokenizer, const std::vector<TokenId>& prompt,
                     const std::vector<TokenLogprob>& scores, const std::vector<TokenLogprob>& lp,
                     size_t offset) {
  json out = {{"tokens", json::array()}, {"token_logprobs", json::array()},
              {"top_logprobs", json::array()}, {"text_offset", json::array()}};
  size_t at = 0;
  for (size_t k = 0; k < prompt.size(); ++k) {
    const std::string text = tokenizer.token_to_bytes(prompt[k]);
    out["tokens"].push_back(text);
    out["text_offset"].push_back(at);
    at += text.size();
    if (k == 0 || k - 1 >= scores.size()) {
      out["token_logprobs"].push_back(nullptr);
      out["top_logprobs"].push_back(nullptr);
      continue;
    }
    out["token_logprobs"].push_back(scores[k - 1].logprob);
    json top = json::object();
    for (const auto& [id, value] : scores[k - 1].top) top[tokenizer.token_to_bytes(id)] = value;
    out["top_logprobs"].push_back(std::move(top));
  }
  const json rest = completion_logprobs(tokenizer, lp, offset);
  for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
    for (const json& v : rest[key]) out[key].push_back(v);
  }
  return out;
}

json completion_response(const ResponseHead& head, const Tokenizer& tokenizer,
                         const ApiRequest& r, const Generation& g) {
  json out = head_json(head, r, false);
  json choices = json::array();
  for (size_t i = 0; i < g.choices().size(); ++i) {
    const Choice& c = g.choices()[i];
    const size_t p = i / static_cast<size_t>(r.n);
    const std::string prefix = r.echo ? r.prompt_texts[p] : std::string();
    json logprobs = nullptr;
    if (r.logprobs && r.echo) {
      logprobs = echoed_logprobs(tokenizer, r.prompts[p], g.prompt_logprobs(p), c.logprobs,
                                 prefix.size());
    } else if (r.logprobs) {
      logprobs = completion_logprobs(tokenizer, c.logprobs, 0);
    }
    choices.push_back({{"index", i},
                       {"text", prefix + c.text.text()},
                       {"logprobs", std::move(logprobs)},
                       {"finish_reason", finish_json(c.finish_reason)}});
  }
  out["choices"] = std::move(choices);
  out["usage"] = usage_of(g);
  return out;
}

json chat_response(const ResponseHead& head, const Tokenizer& tokenizer, const ApiRequest& r,
                   const Generation& g) {
  json out = head_json(head, r, false);
  json choices = json::array();
  for (size_t i = 0; i < g.choices().size(); ++i) {
    const Choice& c = g.choices()[i];
    json message = {{"role", "assistant"}, {"content", c.content()}};
    if (!c.reasoning.empty()) message["reasoning_content"] = c.reasoning;
    std::string finish = c.finish_reason;
    if (!r.tools.empty()) {
      const ParsedToolCalls p = parse_tool_calls(c.content(), r.tool_format, r.tools);
      if (!p.calls.empty()) {
        message["content"] = p.content.empty() ? json(nullptr) : json(p.content);
        message["tool_calls"] = tool_calls_json(p.calls);
        if (finish == "stop") finish = "tool_calls";
      }
    }
    choices.push_back({{"index", i},
                       {"message", std::move(message)},
                       {"logprobs", r.logprobs ? chat_logprobs(tokenizer, c.logprobs) : json(nullptr)},
                       {"finish_reason", finish_json(finish)}});
  }
  out["choices"] = std::move(choices);
  out["usage"] = usage_of(g);
  return out;
}

json completion_chunk(const ResponseHead& head, const Tokenizer& tokenizer, const ApiRequest& r,
                      const ChoiceDelta& d, size_t offset) {
  json out = head_json(head, r, true);
  json choice = {{"index", d.index},
                 {"text", d.text},
                 {"logprobs", r.logprobs ? completion_logprobs(tokenizer, d.logprobs, offset)
                                         : json(nullptr)},
                 {"finish_reason", finish_json(d.finish_reason)}};
  out["choices"] = json::array({std::move(choice)});
  if (r.include_usage) out["usage"] = nullptr;
  return out;
}

json chat_chunk(const ResponseHead& head, const Tokenizer& tokenizer, const ApiRequest& r,
                const ChoiceDelta& d, bool with_role) {
  json out = head_json(head, r, true);
  json delta = json::object();
  if (with_role) delta["role"] = "assistant";
  if (!d.text.empty() || with_role) delta["content"] = d.text;
  if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
  json choice = {{"index", d.index},
                 {"delta", std::move(delta)},
                 {"logprobs", r.logprobs ? chat_logprobs(tokenizer, d.logprobs) : json(nullptr)},
                 {"finish_reason", finish_json(d.finish_reason)}};
  out["choices"] = json::array({std::move(choice)});
  if (r.include_usage) out["usage"] = nullptr;
  return out;
}

json tool_calls_json(const std::vector<ToolCall>& calls) {
  json out = json::array();
  for (const ToolCall& c : calls) {
    out.push_back({{"id", c.id},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return out;
}

std::vector<json> tool_call_chunks(const ResponseHead& head, const ApiRequest& r, int32_t index,
                                   const std::vector<ToolCall>& calls) {
  std::vector<json> out;
  for (size_t k = 0; k < calls.size(); ++k) {
    // The name first, then the arguments, as the OpenAI API streams a call.
    const json first = {{"index", k},
                        {"id", calls[k].id},
                        {"type", "function"},
                        {"function", {{"name", calls[k].name}, {"arguments", ""}}}};
    const json args = {{"index", k}, {"function", {{"arguments", calls[k].arguments}}}};
    for (const json& call : {first, args}) {
      json chunk = head_json(head, r, true);
      chunk["choices"] = json::array({{{"index", index},
                                       {"delta", {{"tool_calls", json::array({call})}}},
                                       {"logprobs", nullptr},
                                       {"finish_reason", nullptr}}});
      if (r.include_usage) chunk["usage"] = nullptr;
      out.push_back(std::move(chunk));
    }
  }
  return out;
}

json usage_chunk(const ResponseHead& head, const ApiRequest& r, const Generation& g) {
  json out = head_json(head, r, true);
  out["choices"] = json::array();
  out["usage"] = usage_of(g);
  return out;
}

}  // namespace pagoda::server
