// pagoda serve -m FILE: the OpenAI-compatible HTTP server (docs/SERVER.md).
#include <pthread.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <map>
#include <thread>

#include "backend/backend.h"
#include "backend/backend_choice.h"
#include "cli/chat_support.h"
#include "cli/commands.h"
#include "cli/generation_options.h"
#include "cli/kv_disk_options.h"
#include "cli/format_util.h"
#include "cli/ranks.h"
#include "cli/speculative_options.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "engine/embedder.h"
#include "engine/engine_thread.h"
#include "grammar/grammar_cache.h"
#include "grammar/grammar_compiler.h"
#include "model/kv_storage.h"
#include "model/lora.h"
#include "model/model.h"
#include "model/model_check.h"
#include "model/model_file.h"
#include "server/embeddings.h"
#include "server/http_server.h"
#include "server/reasoning_options.h"
#include "template/chat_template.h"
#include "tools/peft_lora.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {
namespace {

// Grammars compiled at once, each on a thread of its own beside the request threads.
constexpr int kGrammarThreads = 2;

struct ServeOptions {
  std::string model, model_name, chat_template_file;
  std::string kv_type = "f16";
  std::string log_format = "text";
  std::string reasoning_format = "auto";
  int32_t reasoning_budget = -1;
  bool allow_special_in_content = false;
  SpeculativeOptions speculative;
  KvDiskOptions kv_disk;
  server::ServerOptions server;
  GrammarLimits grammar_limits;
  bool insecure = false;
  int threads = 0;
  std::string backend = "cpu";
  CLI::Option* backend_option = nullptr;
  int32_t gpu_layers = -1;  // -ngl / --n-gpu-layers; -1: not given
  std::string pooling;  // embeddings: mean, cls, last ("" the model's own)
  double kv_cache_gb = 0;
  int64_t kv_tokens = 0;
  int32_t max_model_len = 0;
  int64_t responses_max_mib = 256;
  EngineConfig engine;
  std::vector<std::string> loras;  // NAME=PATH
};

// The model's LoRA adapters (serve --lora NAME=PATH), each a model id of its own, run by one
// LoraBackend over `device` so that requests for any of them and for the base share a step.
struct ServedLoras {
  std::vector<std::unique_ptr<LoraAdapter>> adapters;
  std::unique_ptr<LoraBackend> backend;  // null: no adapters
};

ServedLoras load_loras(const ServeOptions& o, const ModelFile& file, Backend& device,
                       server::ModelContext& context) {
  ServedLoras out;
  if (o.loras.empty()) return out;
  if (ranks() != nullptr) {
    throw UsageError("--lora runs on one process; tensor parallelism does not apply adapters yet");
  }
  std::vector<const LoraAdapter*> list;
  for (const std::string& spec : o.loras) {
    const size_t eq = spec.find('=');
    if (eq == 0 || eq == std::string::npos || eq + 1 == spec.size()) {
      throw UsageError("--lora " + spec + ": give NAME=PATH (the name requests use as their model)");
    }
    const std::string name = spec.substr(0, eq), path = spec.substr(eq + 1);
    if (context.answers_to(name) || context.adapter_named(name) != nullptr) {
      throw UsageError("--lora " + spec + ": the name '" + name + "' is already taken");
    }
    out.adapters.push_back(open_lora_adapter(path, file, 1.0f));
    list.push_back(out.adapters.back().get());
    context.adapters.push_back({name, static_cast<int32_t>(list.size()),
                                out.adapters.back()->digest(), path});
    std::fprintf(stderr, "serve: LoRA adapter '%s': %s, %zu weights, alpha %g\n", name.c_str(),
                 path.c_str(), out.adapters.back()->weights().size(),
                 double(out.adapters.back()->alpha()));
  }
  out.backend = make_lora_backend(device, file, std::move(list), 0);
  return out;
}

// An IPv6 address goes in brackets in a URL: http://[::1]:8080.
std::string url_host(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

int32_t resolve_max_model_len(const ServeOptions& o, const Model& model) {
  if (o.max_model_len > 0) return o.max_model_len;
  const uint32_t trained = model.config().context_length;
  return static_cast<int32_t>(trained == 0 || trained > 8192 ? 8192 : trained);
}

// The file's time, RFC 3339 UTC; empty when it cannot be read.
std::string modified_at(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return "";
  const std::time_t secs = st.st_mtime;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// What Ollama's /api/tags, /api/show and /api/ps describe: the quantization is the tensor type
// holding the most bytes.
server::ModelDescription describe_model(const ModelFile& file, const std::string& chat_template,
                                        bool on_accelerator) {
  server::ModelDescription d;
  d.architecture = file.config().architecture;
  d.format = file.gguf() != nullptr ? "gguf" : "safetensors";
  d.chat_template = chat_template;
  d.modified_at = modified_at(file.path());
  d.trained_context = file.config().context_length;
  std::map<std::string, uint64_t> bytes_by_type;
  for (const TensorRef& t : file.tensors()) {
    d.size_bytes += t.num_bytes;
    d.num_parameters += t.num_elements;
    bytes_by_type[std::string(dtype_traits(t.type).name)] += t.num_bytes;
  }
  uint64_t most = 0;
  for (const auto& [type, bytes] : bytes_by_type) {
    if (bytes > most) {
      most = bytes;
      d.quantization = type;
    }
  }
  d.size_vram = on_accelerator ? d.size_bytes : 0;
  return d;
}

// SIGINT / SIGTERM are blocked in every thread and taken here, so the shutdown runs on a
// normal thread (not in a signal handler).
// A signal before the server runs (while the model loads) just exits.
void wait_for_signal(std::atomic<server::HttpServer*>& target) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  // mpirun hands a signal to every rank; the ranks that follow rank 0 end when it tells them
  // to, once it has finished its requests.
  do {
    sigwait(&set, &sig);
  } while (is_follower());
  server::HttpServer* http = target.load();
  if (http == nullptr) std::_Exit(128 + sig);
  std::fprintf(stderr, "serve: %s: finishing requests in flight, then exiting\n",
               sig == SIGTERM ? "SIGTERM" : "SIGINT");
  http->shutdown();
}

}  // namespace
// Embeddings for /v1/embeddings and /api/embed: an encoder's (BERT) always, with its own
// pooling unless --pooling names one; a generative model's with --pooling, as engine requests
// scheduled beside generation (server/embeddings.h).
void add_embeddings(const ServeOptions& o, Model& model, Backend& backend,
                    const Tokenizer& tokenizer, EngineThread& engine, int32_t max_model_len,
                    server::ModelContext& context) {
  const bool encoder = !model.config().causal_attention;
  if (!encoder && o.pooling.empty()) return;
  // A generative model's input runs in the engine's KV cache: at most what the cache holds.
  const EngineStats stats = engine.stats();
  const int64_t capacity = int64_t{stats.scheduler.kv.num_blocks} * stats.block_size;
  const int64_t longest = max_model_len > 0 ? std::min<int64_t>(max_model_len, capacity) : capacity;
  auto embedder = std::make_unique<Embedder>(
      model, backend, tokenizer,
      EmbedderOptions{.pooling = o.pooling, .max_tokens = encoder ? max_model_len : longest});
  context.embeddings = std::make_shared<server::EmbeddingService>(std::move(embedder),
                                                                  encoder ? nullptr : &engine);
}

Action add_serve(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  auto* cmd = app.add_subcommand("serve", "Serve the OpenAI-compatible HTTP API and a web page");
  cmd->add_option("-m,--model", o->model, "GGUF file or Hugging Face model folder")->required();
  cmd->add_option("--lora", o->loras,
                  "NAME=PATH: a LoRA adapter (llama.cpp's GGUF form) served as model NAME beside "
                  "the base, applied unmerged; requests for different adapters share a step "
                  "(repeatable)");
  cmd->add_option("--host", o->server.host, "Address to listen on")->default_val("127.0.0.1");
  cmd->add_option("--port", o->server.port, "Port (0: any free port)")->default_val(8080)
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", o->server.api_key, "Require this key (Authorization: Bearer KEY)");
  cmd->add_flag("--insecure", o->insecure, "Allow a non-loopback address without --api-key");
  cmd->add_flag("--public-metrics", o->server.public_metrics,
                "With --api-key: /metrics, /stats and /openapi.json answer without the key");
  cmd->add_option("--allowed-host", o->server.origins.allowed_hosts,
                  "A Host name to answer besides the loopback ones (repeatable; '*': any). On a "
                  "loopback address only loopback names are answered by default (no DNS "
                  "rebinding); on another address any, unless some are named");
  cmd->add_option("--cors-origin", o->server.origins.cors_origins,
                  "An origin (e.g. http://localhost:3000) whose web pages may call the API, with "
                  "CORS answered for it (repeatable; '*': any). Requests from other sites' pages "
                  "are refused");
  cmd->add_option("--model-name", o->model_name,
                  "Model id clients use (default: the file's stem; its general.name is also accepted)");
  cmd->add_option("--chat-template", o->chat_template_file, "Jinja chat template file to use");
  cmd->add_option("--reasoning-format", o->reasoning_format,
                  "auto: a thinking model's thinking (<think> ... </think>, found from its chat "
                  "template) comes back apart from the answer (reasoning_content, thinking "
                  "blocks, Ollama's thinking); none: it stays in the content")
      ->check(CLI::IsMember({"auto", "none"}))
      ->capture_default_str();
  cmd->add_option("--reasoning-budget", o->reasoning_budget,
                  "Thinking tokens of a request at most, its closing tag forced after them "
                  "(-1: no limit; a request's reasoning_budget or thinking.budget_tokens wins)")
      ->check(CLI::Range(-1, 1 << 30))
      ->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "Compute threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  o->backend_option = cmd->add_option("--backend,--device", o->backend, backend_help())
                          ->check(CLI::IsMember(backend_names()))
                          ->capture_default_str();
  add_gpu_layers_option(cmd, o->gpu_layers);
  cmd->add_option("--pooling", o->pooling,
                  "Embeddings (/v1/embeddings, /api/embed): mean, cls or last token; turns them "
                  "on for a generative model (llama-server's --embeddings --pooling); default: "
                  "an embedding model's own")
      ->check(CLI::IsMember({"mean", "cls", "last"}));
  cmd->add_option("--kv-cache-gb", o->kv_cache_gb, "KV cache memory in GiB (default 1)")
      ->check(CLI::Range(0.0, 4096.0));
  cmd->add_option("--kv-tokens", o->kv_tokens, "KV cache size in tokens (instead of --kv-cache-gb)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--kv-type", o->kv_type, kv_type_help())
      ->capture_default_str()
      ->check(CLI::IsMember(kv_type_name_list()));
  cmd->add_option("--block-size", o->engine.block_size, "Tokens per KV block")->default_val(16)
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--max-batched-tokens", o->engine.max_num_batched_tokens,
                  "Token budget of one engine step")->default_val(512)->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-seqs", o->engine.max_num_seqs, "Sequences running at once")
      ->default_val(64)->check(CLI::Range(1, 4096));
  cmd->add_option("--max-model-len,-c,--ctx-size", o->max_model_len,
                  "Prompt + output tokens of a request at most (default: the model's, <= 8192)")
      ->check(CLI::Range(0, 1 << 22));
  cmd->add_flag("--no-prefix-caching", [o](int64_t) { o->engine.enable_prefix_caching = false; },
                "Do not reuse KV blocks of shared prefixes");
  server::HttpLimits& h = o->server.http;
  cmd->add_option("--max-body-bytes", h.max_body_bytes,
                  "Largest request body, chunked or not (HTTP 413 above)")->default_val(8u << 20);
  cmd->add_option("--max-header-bytes", h.max_header_bytes,
                  "Largest request line + headers (HTTP 431 above)")->default_val(64u << 10)
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30));
  cmd->add_option("--max-headers", h.max_headers, "Most headers in a request (HTTP 431 above)")
      ->default_val(100)->check(CLI::Range(1, 100000));
  cmd->add_option("--header-timeout", h.header_timeout_s,
                  "Seconds a request's header may take to arrive")->default_val(10.0)
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--body-timeout", h.body_timeout_s, "Seconds a request's body may take to arrive")
      ->default_val(60.0)->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--idle-timeout", h.idle_timeout_s,
                  "Seconds a keep-alive connection may wait for its next request")->default_val(30.0)
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--write-timeout", h.write_timeout_s,
                  "Seconds any one write to a client may take")->default_val(60.0)
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--max-connections", h.max_connections, "Open connections at most")
      ->default_val(4096)->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-connections-per-client", h.max_connections_per_client,
                  "Open connections from one client address at most")->default_val(512)
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-grammar-states", o->grammar_limits.max_states,
                  "States one structured-output grammar may take: positions, repetitions "
                  "unrolled, parse stacks of a state (HTTP 400 above)")
      ->default_val(GrammarLimits{}.max_states)
      ->check(CLI::Range(size_t{1000}, size_t{1} << 28));
  cmd->add_option("--max-grammar-ms", o->grammar_limits.max_ms,
                  "Milliseconds one structured-output grammar may take to compile (HTTP 400 "
                  "above)")
      ->default_val(GrammarLimits{}.max_ms)
      ->check(CLI::Range(1.0, 600'000.0));
  cmd->add_option("--max-json-depth", o->server.limits.max_json_depth,
                  "Deepest nesting of arrays and objects in a request body")->default_val(64)
      ->check(CLI::Range(1, 10000));
  add_speculative_options(cmd, o->speculative);
  add_kv_disk_options(cmd, o->kv_disk);
  cmd->add_flag("--allow-special-in-content", o->allow_special_in_content,
                "Read control-token text in chat messages as control tokens (off: it is text)");
  cmd->add_option("--log-format", o->log_format,
                  "Request log on stderr: text, json (one object per line) or none")
      ->default_val("text")->check(CLI::IsMember({"text", "json", "none"}));
  cmd->add_option("--max-pending", o->server.max_pending,
                  "Sequences (prompts x n) in flight at most; more get HTTP 503")->default_val(256)
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--max-n", o->server.limits.max_n, "Largest n")->default_val(16)
      ->check(CLI::Range(1, kMaxNumSamples));
  cmd->add_option("--max-tokens-limit", o->server.limits.max_tokens, "Largest max_tokens")
      ->default_val(8192)->check(CLI::Range(1, 1 << 22));
  cmd->add_option("--responses-max", o->server.responses_max_count,
                  "Responses API: stored responses kept at most (least recently used go first; 0: "
                  "none stored)")->default_val(1024)->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--responses-max-mib", o->responses_max_mib,
                  "Responses API: MiB of stored responses at most")->default_val(256)
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--shutdown-timeout", o->server.shutdown_timeout_s,
                  "Seconds to let requests finish on SIGTERM")->default_val(30.0);
  return [o] {
    o->server.responses_max_bytes = static_cast<size_t>(o->responses_max_mib) << 20;
    apply_gpu_layers(o->gpu_layers, o->backend_option, o->backend);
    check_kv_disk_options(o->kv_disk, o->backend);
    if (!server::is_loopback_host(o->server.host) && o->server.api_key.empty() && !o->insecure) {
      fail("refusing to listen on ", o->server.host,
           " without --api-key: anyone who can reach it could use it (add --insecure to do so "
           "anyway)");
    }
    // Block the shutdown signals before any thread starts, so only wait_for_signal sees them.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::signal(SIGPIPE, SIG_IGN);
    static std::atomic<server::HttpServer*> running{nullptr};
    std::thread(wait_for_signal, std::ref(running)).detach();
    auto file = ModelFile::open(o->model);
    check_model(*file);
    auto tokenizer = Tokenizer::create(file->vocab());
    auto model = Model::load(*file, ranks());
    auto backend = make_backend(o->backend, o->threads);
    if (follow_rank0(*model, *backend)) return 0;  // rank 0 serves; the others follow it
    const Vocab& vocab = tokenizer->vocab();
    std::shared_ptr<ChatTemplate> chat;
    if (std::string source = chat_template_source(o->chat_template_file, *file, vocab);
        !source.empty()) {
      chat = std::make_shared<ChatTemplate>(std::move(source));
    }
    EngineConfig config = o->engine;
    config.max_model_len = resolve_max_model_len(*o, *model);
    warn_past_trained_context(config.max_model_len, model->config().context_length);
    config.kv_type = parse_kv_type(o->kv_type);
    DraftModel draft;
    config.speculative = speculative_config(o->speculative, *file, draft);
    if (o->kv_tokens > 0) {
      config.num_kv_cache_tokens = o->kv_tokens;
    } else {
      config.kv_cache_bytes = static_cast<uint64_t>((o->kv_cache_gb > 0 ? o->kv_cache_gb : 1.0) *
                                                    double(uint64_t{1} << 30));
    }
    server::ModelContext context =
        server::named_model(o->model, file->config().name, o->model_name);
    context.tokenizer = tokenizer.get();
    context.max_model_len = config.max_model_len;
    context.vocab_size = static_cast<int32_t>(vocab.size());
    context.allow_special_in_content = o->allow_special_in_content;
    std::string template_text;
    if (chat) {
      template_text = chat_template_source(o->chat_template_file, *file, vocab);
      context.tool_format = server::tool_format_for_template(template_text);
      context.template_renders_tools = server::template_renders_tools(template_text);
      context.template_traits = server::template_traits(template_text);
      context.reasoning_syntax = server::reasoning_syntax_for_template(template_text);
    }
    context.split_reasoning = o->reasoning_format == "auto";
    context.reasoning_budget = o->reasoning_budget;
    context.description = describe_model(*file, template_text, o->backend == "cuda");
    context.grammars = std::make_shared<GrammarCompiler>(std::make_shared<GrammarCache>(*tokenizer),
                                                         o->grammar_limits, kGrammarThreads);
    if (chat) set_chat_renderer(context, chat, vocab);
    context.generates = model->config().causal_attention;
    nlohmann::json info = {{"id", context.name},
                           {"object", "model"},
                           {"created", 0},
                           {"owned_by", "pagoda"},
                           {"max_model_len", config.max_model_len},
                           {"chat_template", chat != nullptr}};

    if (!context.generates) {  // an encoder: the engine never steps, one block is enough
      config.kv_cache_bytes = 0;
      config.num_kv_cache_tokens = config.block_size;
      if (!o->kv_disk.folder.empty()) fail("--kv-disk: an encoder keeps no KV cache");
    }
    apply_kv_disk_options(o->kv_disk, *file, config.max_model_len, config);
    ServedLoras loras = load_loras(*o, *file, *backend, context);
    Backend& runs_on = loras.backend ? *loras.backend : *backend;
    auto core = std::make_unique<Engine>(*model, runs_on, config);
    core->set_lora(loras.backend.get());
    auto engine = std::make_unique<EngineThread>(std::move(core));
    add_embeddings(*o, *model, runs_on, *tokenizer, *engine, config.max_model_len, context);
    o->server.log_format = o->log_format == "json"   ? server::LogFormat::kJson
                           : o->log_format == "none" ? server::LogFormat::kNone
                                                     : server::LogFormat::kText;
    server::HttpServer http(o->server, context, *engine, info);
    const int port = http.bind();
    std::fprintf(stderr,
                 "serve: %s on http://%s:%d (max model len %d, KV %.2f GiB, %d seqs, chat "
                 "template: %s%s)\n",
                 context.name.c_str(), url_host(o->server.host).c_str(), port,
                 config.max_model_len,
                 double(engine->stats().kv_cache_bytes) / double(uint64_t{1} << 30),
                 config.max_num_seqs, chat ? "yes" : "none",
                 config.speculative.num_tokens > 0
                     ? (", speculative: " + std::to_string(config.speculative.num_tokens) +
                        " tokens, " + (o->speculative.draft_model.empty() ? "n-gram" : "draft " + o->speculative.draft_model))
                           .c_str()
                     : "");
    running = &http;
    // Tensor parallel: another rank gone means no step can finish; say so to the clients.
    on_rank_lost([&http](int rank, int size) {
      const std::string message = "tensor parallel: rank " + std::to_string(rank) + " of " +
                                  std::to_string(size) + " is gone (its process ended)";
      std::fprintf(stderr, "serve: %s: failing the requests in flight, exiting\n",
                   message.c_str());
      http.fail_in_flight(message, 0.5);
    });
    http.run();
    running = nullptr;
    std::fprintf(stderr, "serve: stopped\n");
    return 0;
  };
}

}  // namespace pagoda::cli
