// Loading one served model for pagoda serve (see serve_model.h).
#include "cli/serve_model.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>

#include "backend/backend_choice.h"
#include "cli/chat_support.h"
#include "cli/commands.h"
#include "cli/format_util.h"
#include "cli/ranks.h"
#include "core/dtype.h"
#include "core/error.h"
#include "engine/embedder.h"
#include "format/gguf.h"
#include "engine/engine_thread.h"
#include "grammar/grammar_cache.h"
#include "model/kv_storage.h"
#include "model/lora.h"
#include "model/model_check.h"
#include "server/embeddings.h"
#include "server/reasoning_options.h"
#include "server/utc_time.h"
#include "template/chat_template.h"
#include "tools/peft_lora.h"

namespace pagoda::cli {
namespace {

namespace fs = std::filesystem;

// Grammars compiled at once, each on a thread of its own beside the request threads.
constexpr int kGrammarThreads = 2;

// The model's LoRA adapters (serve --lora NAME=PATH, and those loaded at run time), each a
// model id of its own, run by one LoraBackend over `device` so that requests for any of them
// and for the base share a step.
struct ServedLoras {
  std::unique_ptr<LoraBackend> backend;  // null: no adapters
  std::shared_ptr<server::LoraSet> set;  // the adapters' weights: kept until the engine stops
};

// What server::LoraSet asks of the model: adapter files read against its base, and slots of its
// LoraBackend filled between two steps of its engine.
class AdapterSlots final : public server::AdapterHost {
 public:
  AdapterSlots(const ModelFile& file, LoraBackend& backend, EngineThread& engine)
      : file_(file), backend_(backend), engine_(engine) {}

  Opened open(const std::string& path) override {
    std::shared_ptr<const LoraAdapter> a = open_lora_adapter(path, file_, 1.0f);
    return {a, a->digest(), str_cat(a->weights().size(), " weights, alpha ", a->alpha())};
  }
  void install(int32_t slot, const void* adapter) override {
    engine_.run_between_steps(
        [&] { backend_.set_adapter(slot, static_cast<const LoraAdapter*>(adapter)); });
  }

 private:
  const ModelFile& file_;
  LoraBackend& backend_;
  EngineThread& engine_;
};

// The LoRA backend over `device`, with --max-loras slots, or none when the model takes no
// adapters (no --lora, no --allow-lora-loading).
std::unique_ptr<LoraBackend> lora_backend(const ServeOptions& o, const ModelFile& file,
                                          Backend& device) {
  if (o.loras.empty() && !o.allow_lora_loading) return nullptr;
  if (ranks() != nullptr) {
    throw UsageError("--lora runs on one process; tensor parallelism does not apply adapters yet");
  }
  if (o.max_loras < 1) throw UsageError("--max-loras must be 1 or more");
  if (static_cast<int32_t>(o.loras.size()) > o.max_loras) {
    throw UsageError(str_cat(o.loras.size(), " --lora adapters given and --max-loras is ",
                             o.max_loras, ": raise --max-loras"));
  }
  return make_lora_backend(device, file, {}, 0, o.max_loras + 1);
}

// The adapter set over the running engine, with the --lora adapters loaded.
std::shared_ptr<server::LoraSet> lora_set(const ServeOptions& o, const ModelFile& file,
                                          LoraBackend& backend, EngineThread& engine,
                                          const server::ModelContext& context) {
  auto set = std::make_shared<server::LoraSet>(
      o.max_loras, std::make_shared<AdapterSlots>(file, backend, engine), o.allow_lora_loading);
  for (const std::string& spec : o.loras) {
    const size_t eq = spec.find('=');
    if (eq == 0 || eq == std::string::npos || eq + 1 == spec.size()) {
      throw UsageError("--lora " + spec + ": give NAME=PATH (the name requests use as their model)");
    }
    const std::string name = spec.substr(0, eq), path = spec.substr(eq + 1);
    if (context.answers_to(name) || set->find(name) != nullptr) {
      throw UsageError("--lora " + spec + ": the name '" + name + "' is already taken");
    }
    try {
      set->load(name, path, false);
    } catch (const server::ApiError& e) {
      throw UsageError(str_cat("--lora ", spec, ": ", e.what()));
    }
  }
  return set;
}

// Everything a served model's requests run on; the engine goes first, the file last.
struct ServedParts {
  OpenedModel opened;
  DraftModel draft;
  ServedLoras loras;
  std::shared_ptr<ChatTemplate> chat;
  std::unique_ptr<EngineThread> engine;
};

int32_t resolve_max_model_len(const ServeOptions& o, const Model& model) {
  if (o.max_model_len > 0) return o.max_model_len;
  const uint32_t trained = model.config().context_length;
  return static_cast<int32_t>(trained == 0 || trained > 8192 ? 8192 : trained);
}

// The file's time, RFC 3339 UTC; empty when it cannot be read.
std::string modified_at(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return "";
  return server::utc_time(std::chrono::system_clock::from_time_t(st.st_mtime));
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

EngineConfig engine_config(const ServeOptions& o, const ModelFile& file, const Model& model,
                           DraftModel& draft) {
  EngineConfig config = o.engine;
  config.max_model_len = resolve_max_model_len(o, model);
  warn_past_trained_context(config.max_model_len, model.config().context_length);
  config.kv_type = parse_kv_type(o.kv_type);
  config.speculative = speculative_config(o.speculative, file, draft);
  if (o.kv_tokens > 0) {
    config.num_kv_cache_tokens = o.kv_tokens;
  } else {
    config.kv_cache_bytes = static_cast<uint64_t>((o.kv_cache_gb > 0 ? o.kv_cache_gb : 1.0) *
                                                  double(uint64_t{1} << 30));
  }
  if (!model.config().causal_attention) {  // an encoder: the engine never steps, one block is enough
    config.kv_cache_bytes = 0;
    config.num_kv_cache_tokens = config.block_size;
    if (!o.kv_disk.folder.empty()) fail("--kv-disk: an encoder keeps no KV cache");
    if (o.kv_disk.offload_gb > 0) fail("--kv-offload-gb: an encoder keeps no KV cache");
  }
  apply_kv_disk_options(o.kv_disk, file, config.max_model_len, config);
  return config;
}

}  // namespace

OpenedModel open_model(const ServeOptions& o, const std::string& path) {
  OpenedModel m;
  m.file = ModelFile::open(path);
  check_model(*m.file);
  m.tokenizer = Tokenizer::create(m.file->vocab());
  m.model = Model::load(*m.file, ranks());
  m.backend = make_backend(o.backend, o.threads, o.cpu_threads);
  return m;
}

std::shared_ptr<server::ServedModel> serve_model(const ServeOptions& o, OpenedModel opened,
                                                 const std::string& id) {
  auto parts = std::make_shared<ServedParts>();
  parts->opened = std::move(opened);
  const ModelFile& file = *parts->opened.file;
  Model& model = *parts->opened.model;
  const Tokenizer& tokenizer = *parts->opened.tokenizer;
  const Vocab& vocab = tokenizer.vocab();
  const std::string template_text = chat_template_source(o.chat_template_file, file, vocab);
  if (!template_text.empty()) parts->chat = std::make_shared<ChatTemplate>(template_text);
  const EngineConfig config = engine_config(o, file, model, parts->draft);

  auto served = std::make_shared<server::ServedModel>();
  server::ModelContext& context = served->context;
  context = server::named_model(file.path(), file.config().name, id.empty() ? o.model_name : id);
  context.tokenizer = &tokenizer;
  context.max_model_len = config.max_model_len;
  context.vocab_size = static_cast<int32_t>(vocab.size());
  context.allow_special_in_content = o.allow_special_in_content;
  if (!model.config().causal_attention && !o.kv_disk.save_dir.empty()) {
    fail("--kv-save-dir: an encoder keeps no KV cache");
  }
  context.kv_identity = kv_save_identity(o.kv_disk, file, config, o.backend);
  if (parts->chat) {
    context.tool_format = server::tool_format_for_template(template_text);
    context.template_renders_tools = server::template_renders_tools(template_text);
    context.template_traits = server::template_traits(template_text);
    context.reasoning_syntax = server::reasoning_syntax_for_template(template_text);
    set_chat_renderer(context, parts->chat, vocab);
  }
  context.split_reasoning = o.reasoning_format == "auto";
  context.reasoning_budget = o.reasoning_budget;
  context.description = describe_model(file, parts->chat ? template_text : "", o.backend == "cuda");
  context.grammars = std::make_shared<GrammarCompiler>(std::make_shared<GrammarCache>(tokenizer),
                                                       o.grammar_limits, kGrammarThreads);
  context.generates = model.config().causal_attention;
  served->info = {{"id", context.name},         {"object", "model"},
                  {"created", 0},               {"owned_by", "pagoda"},
                  {"max_model_len", config.max_model_len}, {"chat_template", parts->chat != nullptr}};

  parts->loras.backend = lora_backend(o, file, *parts->opened.backend);
  Backend& runs_on = parts->loras.backend ? *parts->loras.backend : *parts->opened.backend;
  auto core = std::make_unique<Engine>(model, runs_on, config);
  core->set_lora(parts->loras.backend.get());
  parts->engine = std::make_unique<EngineThread>(std::move(core));
  served->engine = parts->engine.get();
  if (parts->loras.backend) {
    parts->loras.set = lora_set(o, file, *parts->loras.backend, *parts->engine, context);
    context.loras = parts->loras.set;
  }
  add_embeddings(o, model, runs_on, tokenizer, *parts->engine, config.max_model_len, context);
  served->owner = std::move(parts);
  return served;
}

namespace {

// Bytes a model will take once served: its weights, its KV cache and a margin for buffers.
uint64_t estimate_bytes(const ServeOptions& o, const ModelFile& file) {
  uint64_t weights = 0;
  for (const TensorRef& t : file.tensors()) weights += t.num_bytes;
  const ModelConfig& c = file.config();
  uint64_t kv = 0;
  if (c.causal_attention) {
    kv = o.kv_tokens > 0 ? static_cast<uint64_t>(o.kv_tokens) * c.kv_bytes_per_token(2)
                         : static_cast<uint64_t>((o.kv_cache_gb > 0 ? o.kv_cache_gb : 1.0) *
                                                 double(uint64_t{1} << 30));
  }
  return weights + kv + (uint64_t{64} << 20);
}

uint64_t size_on_disk(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_directory(p, ec)) return fs::file_size(p, ec);
  uint64_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(p, ec)) {
    if (e.is_regular_file(ec)) total += e.file_size(ec);
  }
  return total;
}

// The spec of the model at `path`, read from its header; a header that cannot be read is said
// in one line and left for the load to report to the model's requests.
server::ModelSpec spec_for(const ServeOptions& o, const std::string& id, const std::string& path) {
  server::ModelSpec s;
  s.path = path;
  const fs::path p = fs::path(path).lexically_normal();
  const fs::path named = p.has_filename() ? p : p.parent_path();
  s.id = !id.empty() ? id : named.stem().string();
  if (named.filename().string() != s.id) s.aliases.push_back(named.filename().string());
  try {
    auto file = ModelFile::open(path);
    s.memory_bytes = estimate_bytes(o, *file);
    s.description = describe_model(*file, "", o.backend == "cuda");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "serve: model '%s' (%s): %s\n", s.id.c_str(), path.c_str(), e.what());
    s.memory_bytes = size_on_disk(p);
    s.description.modified_at = modified_at(path);
    s.description.size_bytes = s.memory_bytes;
  }
  return s;
}

// A GGUF file that holds a LoRA adapter or a projector, not a model.
bool is_adapter_file(const fs::path& p) {
  try {
    const std::string type = GgufFile::open(p.string())->try_string("general.type").value_or("model");
    return type != "model";
  } catch (const std::exception&) {
    return false;  // a file that does not open is listed; its load says why
  }
}

}  // namespace

std::pair<std::string, std::string> split_model_arg(const std::string& arg) {
  const size_t eq = arg.find('=');
  std::error_code ec;
  if (eq == std::string::npos || eq == 0 || fs::exists(arg, ec)) return {"", arg};
  return {arg.substr(0, eq), arg.substr(eq + 1)};
}

std::vector<server::ModelSpec> model_specs(const ServeOptions& o) {
  std::vector<server::ModelSpec> specs;
  auto add = [&](server::ModelSpec s) {
    for (const server::ModelSpec& other : specs) {
      if (other.id == s.id) {
        std::fprintf(stderr, "serve: skipping %s: the id '%s' is taken by %s\n", s.path.c_str(),
                     s.id.c_str(), other.path.c_str());
        return;
      }
    }
    specs.push_back(std::move(s));
  };
  for (const std::string& m : o.models) {
    const auto [id, path] = split_model_arg(m);
    std::error_code ec;
    if (!fs::exists(path, ec)) throw UsageError("-m " + m + ": no such file or folder: " + path);
    add(spec_for(o, id, path));
  }
  if (!o.models_dir.empty()) {
    std::error_code ec;
    if (!fs::is_directory(o.models_dir, ec)) {
      throw UsageError("--models-dir " + o.models_dir + ": not a folder");
    }
    std::vector<fs::path> found;
    for (const auto& e : fs::directory_iterator(o.models_dir, ec)) {
      const fs::path& p = e.path();
      if (e.is_directory(ec) ? fs::exists(p / "config.json", ec)
                             : p.extension() == ".gguf" && !is_adapter_file(p)) {
        found.push_back(p);
      }
    }
    std::sort(found.begin(), found.end());
    for (const fs::path& p : found) add(spec_for(o, "", p.string()));
  }
  return specs;
}

std::string served_line(const ServeOptions& o, const server::ServedModel& m) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "max model len %d, KV %.2f GiB, %d seqs, chat template: %s",
                m.context.max_model_len,
                double(m.engine->stats().kv_cache_bytes) / double(uint64_t{1} << 30),
                o.engine.max_num_seqs, m.info.value("chat_template", false) ? "yes" : "none");
  std::string line = buf;
  if (o.speculative.num_tokens > 0 || !o.speculative.draft_model.empty()) {
    line += ", speculative: " +
            (o.speculative.draft_model.empty() ? "n-gram" : "draft " + o.speculative.draft_model);
  }
  return line;
}

}  // namespace pagoda::cli
