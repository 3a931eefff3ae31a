// What pagoda serve loads for one model (weights, tokenizer, chat template, engine, adapters,
// embeddings) and the options that shape it; cli/serve.cc runs the server over one or several.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "backend/backend.h"
#include "cli/kv_disk_options.h"
#include "cli/speculative_options.h"
#include "engine/engine.h"
#include "grammar/grammar_compiler.h"
#include "model/model.h"
#include "model/model_file.h"
#include "server/http_server.h"
#include "server/model_set.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {

struct ServeOptions {
  std::vector<std::string> models;  // -m [ID=]PATH, repeatable
  std::string models_dir;
  std::string model_name, chat_template_file;
  std::string kv_type = "f16";
  std::string log_format = "text";
  std::string reasoning_format = "auto";
  int32_t reasoning_budget = -1;
  bool allow_special_in_content = false;
  SpeculativeOptions speculative;
  KvDiskOptions kv_disk;
  server::ServerOptions server;
  server::ModelSetOptions model_set;
  double max_memory_gb = 0;
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
  int32_t max_loras = 8;            // adapters loaded at once
  bool allow_lora_loading = false;  // /v1/load_lora_adapter and /v1/unload_lora_adapter open
  // Several models on the CPU: the one set of threads their backends share.
  std::shared_ptr<CpuThreads> cpu_threads;
};

// A model's file, tokenizer, weights and backend, opened before the rest is built (tensor
// parallel ranks other than 0 stop there and follow rank 0).
struct OpenedModel {
  std::unique_ptr<ModelFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Model> model;
  std::unique_ptr<Backend> backend;
};
OpenedModel open_model(const ServeOptions& o, const std::string& path);

// The served model over `opened`: chat template, engine thread, adapters, embeddings. `id`
// empty: named from the file (--model-name, else its stem).
std::shared_ptr<server::ServedModel> serve_model(const ServeOptions& o, OpenedModel opened,
                                                 const std::string& id);

// `-m [ID=]PATH` as {id, path}: the id is empty when none is given (a path holding '=' that
// exists is a path).
std::pair<std::string, std::string> split_model_arg(const std::string& arg);

// The models `-m [ID=]PATH` (repeated) and --models-dir name, with their memory estimates:
// every GGUF file of the folder (not LoRA adapters) and every Hugging Face folder in it.
std::vector<server::ModelSpec> model_specs(const ServeOptions& o);

// The one line a server of one model prints once it listens.
std::string served_line(const ServeOptions& o, const server::ServedModel& m);

}  // namespace pagoda::cli
