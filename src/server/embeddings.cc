#include "server/embeddings.h"

#include <cstring>
#include <set>

#include "core/error.h"
#include "server/api_error.h"
#include "server/ollama_api.h"
#include "server/request_fields.h"
#include "server/responses.h"

namespace pagoda::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

EmbeddingService& service_of(const ModelContext& model) {
  if (model.embeddings == nullptr) {
    throw ApiError(400, "invalid_request_error",
                   "the model '" + model.name + "' serves no embeddings: it is a generative "
                   "model; start pagoda serve with --pooling last (or mean) to embed with it",
                   "model", "embeddings_not_enabled");
  }
  return *model.embeddings;
}

void check_model_field(const json& body, const ModelContext& model) {
  const json* v = field(body, "model");
  if (v == nullptr) return;
  if (!v->is_string()) throw bad_param("model", "'model' must be a string");
  if (!model.answers_to(v->get<std::string>())) {
    throw ApiError(404, "invalid_request_error",
                   "The model '" + v->get<std::string>() + "' does not exist; this server serves '" +
                       model.name + "'",
                   "model", "model_not_found");
  }
}

void only_keys(const json& body, const std::set<std::string>& known, const std::string& route) {
  for (const auto& [key, value] : body.items()) {
    if (!known.count(key) && !value.is_null()) {
      throw bad_param(key, "'" + key + "' is not supported by this server's " + route);
    }
  }
}

std::vector<TokenId> token_list(const json& v, const std::string& param,
                                const EmbeddingService& s) {
  std::vector<TokenId> ids;
  ids.reserve(v.size());
  for (const json& t : v) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) {
      throw bad_param(param, "'" + param + "' token ids must be non-negative integers");
    }
    ids.push_back(static_cast<TokenId>(t.get<int64_t>()));
  }
  if (std::string bad = s.check_tokens(ids); !bad.empty()) throw bad_param(param, bad);
  return ids;
}

std::vector<TokenId> text_tokens(const json& v, const std::string& param,
                                 const EmbeddingService& s) {
  const std::string& text = v.get_ref<const std::string&>();
  if (text.empty()) throw bad_param(param, "'" + param + "' must not be an empty string");
  return s.tokenize(text);
}

// OpenAI's `input`: a string, a list of strings, a list of token ids, or a list of such lists.
// Ollama's: a string or a list of strings (`tokens_allowed` false).
std::vector<std::vector<TokenId>> read_input(const json* v, const char* name, bool tokens_allowed,
                                             const EmbeddingService& s) {
  const std::string what = tokens_allowed
                               ? "a string, a list of strings, a list of token ids or a list of "
                                 "token-id lists"
                               : "a string or a list of strings";
  const std::string param = name;
  if (v == nullptr) throw bad_param(param, "'" + param + "' is required");
  if (v->is_string()) return {text_tokens(*v, param, s)};
  if (!v->is_array()) throw bad_param(param, "'" + param + "' must be " + what);
  if (v->empty()) throw bad_param(param, "'" + param + "' must not be an empty list");
  if (v->size() > kMaxEmbeddingInputs) {
    throw bad_param(param, "'" + param + "' has " + std::to_string(v->size()) +
                               " items; at most " + std::to_string(kMaxEmbeddingInputs));
  }
  const json& first = v->front();
  if (tokens_allowed && first.is_number()) return {token_list(*v, param, s)};
  std::vector<std::vector<TokenId>> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& item = (*v)[i];
    const std::string where = param + "[" + std::to_string(i) + "]";
    if (item.is_string() && first.is_string()) {
      out.push_back(text_tokens(item, where, s));
    } else if (tokens_allowed && item.is_array() && first.is_array()) {
      if (item.empty()) throw bad_param(where, "'" + where + "' must not be an empty list");
      out.push_back(token_list(item, where, s));
    } else {
      throw bad_param(param, "'" + param + "' must be " + what + " (items of one kind)");
    }
  }
  return out;
}

// Every input within the model's context (cut to `truncate_to` tokens where given) and the
// request's tokens within kMaxEmbeddingTokens.
void check_lengths(std::vector<std::vector<TokenId>>& inputs, const char* param,
                   const EmbeddingService& s, int64_t truncate_to) {
  int64_t total = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto& ids = inputs[i];
    const auto n = static_cast<int64_t>(ids.size());
    if (truncate_to > 0 && n > truncate_to) {
      s.truncate(ids, truncate_to);
    } else if (n > s.max_tokens()) {
      throw bad_param(param, std::string("input ") + std::to_string(i) + " has " +
                                 std::to_string(n) + " tokens, more than the model's context of " +
                                 std::to_string(s.max_tokens()));
    }
    total += static_cast<int64_t>(ids.size());
  }
  if (total > kMaxEmbeddingTokens) {
    throw bad_param(param, "the inputs have " + std::to_string(total) + " tokens; at most " +
                               std::to_string(kMaxEmbeddingTokens) + " per request");
  }
}

int64_t nanoseconds_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
}

ordered_json float_array(const std::vector<float>& v) {
  ordered_json out = ordered_json::array();
  out.get_ref<ordered_json::array_t&>().reserve(v.size());
  for (float x : v) out.push_back(x);
  return out;
}

// Ollama's options: num_ctx bounds the tokens of an input; nothing else applies to embeddings.
int64_t ollama_num_ctx(const json& body) {
  const json* options = field(body, "options");
  if (options == nullptr) return 0;
  if (!options->is_object()) throw bad_param("options", "'options' must be an object");
  int64_t num_ctx = 0;
  for (const auto& [key, value] : options->items()) {
    if (value.is_null()) continue;
    if (key != "num_ctx") {
      throw bad_param("options." + key, "'options." + key + "' is not supported by this "
                                        "server's embeddings (it honours num_ctx)");
    }
    if (!value.is_number_integer() || value.get<int64_t>() < 1) {
      throw bad_param("options.num_ctx", "'options.num_ctx' must be a positive integer");
    }
    num_ctx = value.get<int64_t>();
  }
  return num_ctx;
}

}  // namespace

EmbeddingResult EmbeddingService::embed(const std::vector<std::vector<TokenId>>& inputs) {
  return engine_ != nullptr ? embed_in_engine(inputs) : embed_in_batches(inputs);
}

EmbeddingResult EmbeddingService::embed_in_engine(const std::vector<std::vector<TokenId>>& inputs) {
  const std::string& pooling = embedder_->pooling();
  const PromptOnly rows = pooling == "mean"  ? PromptOnly::kAllRows
                          : pooling == "cls" ? PromptOnly::kFirstRow
                                             : PromptOnly::kLastRow;
  std::vector<std::shared_ptr<OutputStream>> streams;
  // A request cut short ends its inputs already in the engine.
  struct AbortRest {
    EngineThread& engine;
    std::vector<std::shared_ptr<OutputStream>>& streams;
    ~AbortRest() {
      for (const auto& s : streams) {
        if (!s->done()) engine.abort(s->id());
      }
    }
  } abort_rest{*engine_, streams};
  for (const auto& ids : inputs) {
    GenerationRequest request;
    request.prompt = ids;
    request.embedding = rows;
    streams.push_back(engine_->submit(std::move(request)));
  }
  EmbeddingResult r;
  for (const auto& stream : streams) {
    // An embedding request has one event, its last.
    std::optional<OutputEvent> e = stream->next();
    if (!e || e->finish_reason != FinishReason::kStop || e->embedding.empty()) {
      fail("the embedding was not computed: ", e && !e->error.empty() ? e->error : "the engine ended it");
    }
    r.vectors.emplace_back();
    pool_embedding(e->embedding.data(), 1, dimensions(), "mean", embedder_->normalizes(),
                   r.vectors.back());
  }
  for (const auto& ids : inputs) r.prompt_tokens += static_cast<int64_t>(ids.size());
  return r;
}

EmbeddingResult EmbeddingService::embed_in_batches(const std::vector<std::vector<TokenId>>& inputs) {
  Job job;
  job.inputs = &inputs;
  std::unique_lock<std::mutex> lock(mutex_);
  jobs_.push_back(&job);
  while (!job.done) {
    if (running_) {
      job_done_.wait(lock);
      continue;
    }
    // This thread runs the next pass: the waiting jobs in arrival order, up to a batch of tokens.
    std::vector<Job*> batch;
    std::vector<std::vector<TokenId>> all;
    int64_t tokens = 0;
    while (!jobs_.empty()) {
      int64_t n = 0;
      for (const auto& ids : *jobs_.front()->inputs) n += static_cast<int64_t>(ids.size());
      if (!batch.empty() && tokens + n > embedder_->batch_tokens()) break;
      tokens += n;
      batch.push_back(jobs_.front());
      jobs_.pop_front();
      all.insert(all.end(), batch.back()->inputs->begin(), batch.back()->inputs->end());
    }
    running_ = true;
    lock.unlock();
    EmbeddingResult out;
    std::string error;
    try {
      out = embedder_->embed(all);
    } catch (const std::exception& e) {  // any: the waiting threads must hear of it
      error = e.what();
    }
    lock.lock();
    running_ = false;
    size_t next = 0;
    for (Job* j : batch) {
      j->error = error;
      for (const auto& ids : *j->inputs) {
        if (error.empty()) j->result.vectors.push_back(std::move(out.vectors[next++]));
        j->result.prompt_tokens += static_cast<int64_t>(ids.size());
      }
      j->done = true;
    }
    job_done_.notify_all();
  }
  if (!job.error.empty()) fail(job.error);
  return std::move(job.result);
}

std::string base64_floats(const std::vector<float>& v) {
  static const char kDigits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * sizeof(float), '\0');
  if (!v.empty()) std::memcpy(bytes.data(), v.data(), bytes.size());  // x86 and ARM: little-endian
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const auto b = [&](size_t k) {
      return i + k < bytes.size() ? static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + k])) : 0u;
    };
    const uint32_t n = b(0) << 16 | b(1) << 8 | b(2);
    out += kDigits[n >> 18 & 63];
    out += kDigits[n >> 12 & 63];
    out += i + 1 < bytes.size() ? kDigits[n >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? kDigits[n & 63] : '=';
  }
  return out;
}

HttpResponse openai_embeddings(const std::string& text, const ModelContext& model,
                               const RequestLimits& limits) {
  const json body = parse_json_body(text, limits.max_json_depth);
  if (!body.is_object()) {
    throw ApiError(400, "invalid_request_error", "the request body must be a JSON object");
  }
  only_keys(body, {"input", "model", "encoding_format", "dimensions", "user"}, "/v1/embeddings");
  check_model_field(body, model);
  EmbeddingService& s = service_of(model);
  bool base64 = false;
  if (const json* f = field(body, "encoding_format")) {
    if (*f != "float" && *f != "base64") {
      throw bad_param("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
    }
    base64 = *f == "base64";
  }
  if (field(body, "dimensions") != nullptr) {
    throw bad_param("dimensions", "'dimensions' is not supported: the model '" + model.name +
                                      "' gives " + std::to_string(s.dimensions()) +
                                      " dimensions and cannot shorten them");
  }
  if (const json* u = field(body, "user"); u != nullptr && !u->is_string()) {
    throw bad_param("user", "'user' must be a string");
  }
  auto inputs = read_input(field(body, "input"), "input", true, s);
  check_lengths(inputs, "input", s, 0);
  const EmbeddingResult r = s.embed(inputs);
  ordered_json data = ordered_json::array();
  for (size_t i = 0; i < r.vectors.size(); ++i) {
    ordered_json item = {{"object", "embedding"}, {"index", i}};
    item["embedding"] = base64 ? ordered_json(base64_floats(r.vectors[i]))
                               : ordered_json(float_array(r.vectors[i]));
    data.push_back(std::move(item));
  }
  const ordered_json out = {{"object", "list"},
                    {"data", std::move(data)},
                    {"model", model.name},
                    {"usage", {{"prompt_tokens", r.prompt_tokens}, {"total_tokens", r.prompt_tokens}}}};
  return {200, "application/json", dump(out), {}};
}

HttpResponse ollama_embed(const std::string& path, const std::string& text,
                          const ModelContext& model, const RequestLimits& limits) {
  const auto start = Clock::now();
  const bool legacy = path == "/api/embeddings";
  const json body = parse_json_body(text, limits.max_json_depth);
  if (!body.is_object()) {
    throw ApiError(400, "invalid_request_error", "the request body must be a JSON object");
  }
  if (legacy) {
    only_keys(body, {"model", "prompt", "options", "keep_alive"}, path);
  } else {
    only_keys(body, {"model", "input", "truncate", "options", "keep_alive"}, path);
  }
  const std::string name = ollama_model_name(body, model);
  EmbeddingService& s = service_of(model);
  // The one model stays loaded for the server's life whatever keep_alive asks.
  if (const json* k = field(body, "keep_alive"); k != nullptr && !k->is_number() && !k->is_string()) {
    throw bad_param("keep_alive", "'keep_alive' must be a duration string or a number of seconds");
  }
  const int64_t num_ctx = ollama_num_ctx(body);
  const bool truncate = legacy || bool_field(body, "truncate", true);
  int64_t limit = 0;  // 0: refuse what is too long
  if (truncate) limit = num_ctx > 0 ? std::min(num_ctx, s.max_tokens()) : s.max_tokens();
  auto inputs = read_input(field(body, legacy ? "prompt" : "input"), legacy ? "prompt" : "input",
                           false, s);
  if (!truncate && num_ctx > 0) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (static_cast<int64_t>(inputs[i].size()) > num_ctx) {
        throw bad_param("input", "input " + std::to_string(i) + " has " +
                                     std::to_string(inputs[i].size()) +
                                     " tokens, more than options.num_ctx " + std::to_string(num_ctx) +
                                     " (truncate is false)");
      }
    }
  }
  check_lengths(inputs, legacy ? "prompt" : "input", s, limit);
  const EmbeddingResult r = s.embed(inputs);
  ordered_json out;
  if (legacy) {
    out["embedding"] = float_array(r.vectors.at(0));
  } else {
    out["model"] = name;
    ordered_json list = ordered_json::array();
    for (const auto& v : r.vectors) list.push_back(float_array(v));
    out["embeddings"] = std::move(list);
    out["total_duration"] = nanoseconds_since(start);
    out["load_duration"] = s.load_duration.count();
    out["prompt_eval_count"] = r.prompt_tokens;
  }
  return {200, "application/json", dump(out), {}};
}

}  // namespace pagoda::server
