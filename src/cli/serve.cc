// pagoda serve -m FILE (or several, or --models-dir): the OpenAI-compatible HTTP server
// (docs/SERVER.md).
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <thread>

#include "backend/backend_choice.h"
#include "cli/commands.h"
#include "cli/generation_options.h"
#include "cli/ranks.h"
#include "cli/serve_model.h"
#include "core/error.h"
#include "model/kv_storage.h"
#include "server/http_server.h"

namespace pagoda::cli {
namespace {

// An IPv6 address goes in brackets in a URL: http://[::1]:8080.
std::string url_host(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
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

// A server of several models: the ones -m names are loaded now (up to --max-loaded), the
// others on demand. Options that belong to one model are refused in one line.
std::shared_ptr<server::ModelSet> serve_many(ServeOptions& o) {
  if (ranks() != nullptr) fail("tensor parallelism serves one model (one -m, no --models-dir)");
  if (!o.loras.empty()) fail("--lora applies to one model: serve one -m with its adapters");
  if (o.allow_lora_loading) fail("--allow-lora-loading applies to one model (one -m)");
  if (!o.model_name.empty()) fail("--model-name names one model; with several give -m ID=PATH");
  if (!o.chat_template_file.empty()) fail("--chat-template applies to one model (one -m)");
  if (!o.kv_disk.folder.empty()) fail("--kv-disk serves one model (one -m)");
  if (o.kv_disk.offload_gb > 0) fail("--kv-offload-gb serves one model (one -m)");
  if (!o.kv_disk.save_dir.empty()) fail("--kv-save-dir serves one model (one -m)");
  if (!o.speculative.draft_model.empty()) fail("--draft-model applies to one model (one -m)");
  // One set of CPU threads for every model: two cores do not take two pools.
  if (o.backend == "cpu") o.cpu_threads = make_cpu_threads(o.threads);
  std::vector<server::ModelSpec> specs = model_specs(o);
  if (specs.empty()) fail("--models-dir ", o.models_dir, " holds no GGUF file or Hugging Face folder");
  server::ModelSetOptions options = o.model_set;
  options.memory_budget = static_cast<uint64_t>(o.max_memory_gb * double(uint64_t{1} << 30));
  std::vector<std::shared_ptr<server::ServedModel>> preloaded;
  const size_t first = std::min<size_t>(o.models.size(), static_cast<size_t>(options.max_loaded));
  for (size_t i = 0; i < first; ++i) {
    std::fprintf(stderr, "serve: loading model '%s' (%s)\n", specs[i].id.c_str(), specs[i].path.c_str());
    preloaded.push_back(serve_model(o, open_model(o, specs[i].path), specs[i].id));
  }
  auto loader = [&o](const server::ModelSpec& spec) {
    return serve_model(o, open_model(o, spec.path), spec.id);
  };
  return std::make_shared<server::ModelSet>(std::move(specs), loader, options, std::move(preloaded));
}

}  // namespace

Action add_serve(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  auto* cmd = app.add_subcommand("serve", "Serve the OpenAI-compatible HTTP API and a web page");
  cmd->add_option("-m,--model", o->models,
                  "[ID=]PATH: a GGUF file or Hugging Face model folder (repeatable: a server of "
                  "several models, requests choosing by id; the first is the default)");
  cmd->add_option("--models-dir", o->models_dir,
                  "Serve every GGUF file and Hugging Face folder in DIR (ids: the file stems), each "
                  "loaded when a request first names it");
  cmd->add_option("--max-loaded", o->model_set.max_loaded,
                  "Several models: loaded at once at most; the least recently used idle one is "
                  "unloaded to load another")
      ->default_val(3)->check(CLI::Range(1, 1024));
  cmd->add_option("--max-memory-gb", o->max_memory_gb,
                  "Several models: GiB all loaded models may take (weights + KV cache); default: "
                  "what the machine has free")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--idle-unload", o->model_set.idle_unload_s,
                  "Several models: unload a model idle this many seconds (-1: keep; a request's "
                  "Ollama keep_alive wins)")
      ->default_val(-1.0)->check(CLI::Range(-1.0, 1e9));
  cmd->add_option("--load-timeout", o->model_set.load_timeout_s,
                  "Several models: seconds a request waits for its model to load (then HTTP 503 "
                  "with Retry-After)")
      ->default_val(300.0)->check(CLI::Range(0.1, 86400.0));
  cmd->add_option("--lora", o->loras,
                  "NAME=PATH: a LoRA adapter (llama.cpp's GGUF form) served as model NAME beside "
                  "the base, applied unmerged; requests for different adapters share a step "
                  "(repeatable)");
  cmd->add_option("--max-loras", o->max_loras,
                  "LoRA adapters loaded at once (--lora and those loaded at run time)")
      ->default_val(8)->check(CLI::Range(1, 1024));
  cmd->add_flag("--allow-lora-loading", o->allow_lora_loading,
                "Open POST /v1/load_lora_adapter and /v1/unload_lora_adapter: clients may load "
                "adapter files from this machine's disk (give --api-key where others reach it)");
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
  cmd->add_option("--state-checkpoints", o->engine.num_state_checkpoints,
                  "Hybrid models (Qwen3.5): recurrent-state copies kept for prefix-cache hits, "
                  "one state slot each (about 20 MiB for the 0.8B shape); default: twice "
                  "--max-seqs, at most 512 MiB of them")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--state-snapshots", o->engine.num_state_snapshots,
                  "Hybrid models: state copies for speculative decoding's roll-back, one per "
                  "proposal a step verifies (a step's proposals are bounded by it; 0: none); "
                  "default: 8 for each sequence that may speculate at once, at most 512 MiB")
      ->check(CLI::Range(0, 1 << 20));
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
  add_kv_save_option(cmd, o->kv_disk);
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
    o->server.kv_save_dir = o->kv_disk.save_dir;
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
    if (o->models.empty() && o->models_dir.empty()) {
      throw UsageError("serve: give -m FILE (repeatable) or --models-dir DIR");
    }
    o->server.log_format = o->log_format == "json"   ? server::LogFormat::kJson
                           : o->log_format == "none" ? server::LogFormat::kNone
                                                     : server::LogFormat::kText;
    const bool single = o->models.size() == 1 && o->models_dir.empty();
    std::shared_ptr<server::ModelSet> models;
    if (single) {
      const auto [id, path] = split_model_arg(o->models[0]);
      OpenedModel opened = open_model(*o, path);
      if (follow_rank0(*opened.model, *opened.backend)) return 0;  // rank 0 serves; the others follow it
      models = std::make_shared<server::ModelSet>(serve_model(*o, std::move(opened), id));
    } else {
      models = serve_many(*o);
    }
    server::HttpServer http(o->server, models);
    const int port = http.bind();
    if (single) {
      const auto m = models->loaded().at(0);
      std::fprintf(stderr, "serve: %s on http://%s:%d (%s)\n", m->context.name.c_str(),
                   url_host(o->server.host).c_str(), port, served_line(*o, *m).c_str());
    } else {
      std::fprintf(stderr, "serve: %zu models on http://%s:%d (%zu loaded, at most %d at once)\n",
                   models->specs().size(), url_host(o->server.host).c_str(), port,
                   models->loaded().size(), o->model_set.max_loaded);
    }
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
