// pagoda bench quality -m FILE [--ref REFFILE]: perplexity of a model on a text, and against a
// reference model (F16 vs Q4_K_M of one model, say) the KL divergence of the two token
// distributions, top-1 agreement and the perplexity ratio. Windows and scoring: bench/quality.h.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "backend/backend_choice.h"
#include "backend/kv_format.h"
#include "bench/quality.h"
#include "bench/report.h"
#include "cli/bench_commands.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "model/model.h"
#include "model/model_file.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {
namespace {

std::atomic<bool> g_interrupted{false};

void on_sigint(int) { g_interrupted = true; }

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The text the reference perplexity in ../shared was measured on.
std::string default_text_path() {
  const char* shared = std::getenv("PAGODA_SHARED");
  const std::string root = shared ? shared : "../shared";
  return root + "/testdata/text/tinystories_valid_head.txt";
}

struct Options {
  std::string model, ref, file, json, csv;
  std::string score = "all";
  std::string backend = "cpu";
  std::string kv_type = "f32", ref_kv_type = "f32";  // exact caches: the weights are measured
  int32_t ctx = 256;
  int64_t max_windows = 0;
  int32_t batch = 1;
  int threads = 0;
  bool no_bos = false;
};

struct Loaded {
  std::unique_ptr<ModelFile> file;
  std::unique_ptr<Model> model;
};

Loaded load(const std::string& path, int32_t ctx) {
  Loaded l;
  l.file = ModelFile::open(path);
  l.model = Model::load(*l.file);
  const uint32_t trained = l.model->config().context_length;
  if (trained != 0 && static_cast<uint32_t>(ctx) > trained) {
    fail(path, ": --ctx ", ctx, " is longer than the model's context length ", trained);
  }
  return l;
}

// The two models must give logits over the same tokens for KL and top-1 to mean anything.
void check_same_vocab(const ModelFile& model, const ModelFile& ref) {
  const uint32_t a = model.config().vocab_size, b = ref.config().vocab_size;
  if (a != b) {
    fail(ref.path(), ": vocabulary of ", b, " tokens; ", model.path(), " has ", a,
         " (--ref needs the same vocabulary)");
  }
  const Vocab& va = model.vocab();
  const Vocab& vb = ref.vocab();
  if (va.size() != vb.size()) {
    fail(ref.path(), ": tokenizer has ", vb.size(), " tokens; ", model.path(), " has ",
         va.size(), " (--ref needs the same vocabulary)");
  }
  for (size_t i = 0; i < va.size(); ++i) {
    if (va.tokens[i] != vb.tokens[i]) {
      fail(ref.path(), ": token ", i, " is '", vb.tokens[i], "' but '", va.tokens[i], "' in ",
           model.path(), " (--ref needs the same vocabulary)");
    }
  }
}

// Progress on stderr: a bar redrawn in place on a terminal, otherwise a line every 10 s.
class Progress {
 public:
  explicit Progress(size_t total) : total_(total), tty_(isatty(STDERR_FILENO)) {}

  void update(size_t done, int64_t tokens, double ppl) {
    const double elapsed = seconds_since(start_);
    if (tty_ ? elapsed - last_ < 0.1 && done != total_ : elapsed - last_ < 10) return;
    last_ = elapsed;
    const double eta = done > 0 ? elapsed * static_cast<double>(total_ - done) / done : 0;
    if (tty_) {
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(kWidth * done / std::max<size_t>(total_, 1));
      std::fprintf(stderr, "\r\033[K[%s%s] %zu/%zu windows  PPL %.3f  %.0f s, %.0f s left",
                   std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
                   done, total_, ppl, elapsed, eta);
    } else {
      std::fprintf(stderr, "quality: %zu/%zu windows, %lld tokens, PPL %.3f, %.0f s, %.0f s left\n",
                   done, total_, static_cast<long long>(tokens), ppl, elapsed, eta);
    }
    std::fflush(stderr);
  }

  void finish() {
    if (tty_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  size_t total_;
  bool tty_;
  Clock::time_point start_ = Clock::now();
  double last_ = 0;
};

std::string base_name(const std::string& path) {
  std::filesystem::path p(path);
  if (!p.has_filename()) p = p.parent_path();
  return p.filename().string();
}

// A model's name in the table, with its KV cache type when that is not the exact F32.
std::string label(const std::string& path, const std::string& kv_type) {
  return base_name(path) + (kv_type == "f32" ? "" : " (KV " + kv_type + ")");
}

// One row per model: the reference (perplexity only), then the model measured against it.
bench::Table make_table(const Options& o, const bench::QualityStats& s, size_t windows) {
  bench::Table t;
  t.columns = {"model", "windows", "tokens", "PPL", "+/-"};
  if (s.has_ref()) {
    t.columns.insert(t.columns.end(), {"PPL ratio", "mean KL", "+/-", "median KL", "p99 KL",
                                       "max KL", "top-1 %"});
    t.rows.push_back({"ref: " + label(o.ref, o.ref_kv_type), std::to_string(windows),
                      std::to_string(s.ref_nll.count()), bench::cell(s.ref_nll.perplexity(), 4),
                      bench::cell(s.ref_nll.perplexity_stderr(), 4)});
  }
  std::vector<std::string> row = {label(o.model, o.kv_type), std::to_string(windows),
                                  std::to_string(s.nll.count()),
                                  bench::cell(s.nll.perplexity(), 4),
                                  bench::cell(s.nll.perplexity_stderr(), 4)};
  if (s.has_ref()) {
    row.insert(row.end(), {bench::cell(s.perplexity_ratio(), 5), bench::cell(s.kl_mean(), 6),
                           bench::cell(s.kl_stderr(), 6), bench::cell(s.kl_percentile(50), 6),
                           bench::cell(s.kl_percentile(99), 6),
                           bench::cell(s.kl_percentile(100), 6),
                           bench::cell(100 * s.top1_agreement(), 3)});
  }
  t.rows.push_back(std::move(row));
  return t;
}

// JSON numbers; NaN (nothing measured) becomes null.
nlohmann::ordered_json number(double v) {
  return std::isnan(v) ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(v);
}

nlohmann::ordered_json make_json(const Options& o, const bench::QualityStats& s, size_t windows,
                                 size_t text_tokens, bool bos, double seconds) {
  nlohmann::ordered_json j;
  j["model"] = o.model;
  j["ref"] = o.ref.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(o.ref);
  j["kv_type"] = o.kv_type;
  j["ref_kv_type"] = o.ref.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(o.ref_kv_type);
  j["file"] = o.file;
  j["ctx"] = o.ctx;
  j["score"] = o.score;
  j["bos"] = bos;
  j["text_tokens"] = text_tokens;
  j["windows"] = windows;
  j["scored_tokens"] = s.nll.count();
  j["interrupted"] = g_interrupted.load();
  j["seconds"] = seconds;
  j["tokens_per_second"] = number(seconds > 0 ? s.nll.count() / seconds : 0);
  j["mean_nll"] = number(s.nll.mean_nll());
  j["ppl"] = number(s.nll.perplexity());
  j["ppl_stderr"] = number(s.nll.perplexity_stderr());
  const bool ref = s.has_ref();
  auto ref_number = [&](double v) { return ref ? number(v) : nlohmann::ordered_json(nullptr); };
  j["ref_ppl"] = ref_number(s.ref_nll.perplexity());
  j["ref_ppl_stderr"] = ref_number(s.ref_nll.perplexity_stderr());
  j["ppl_ratio"] = ref_number(s.perplexity_ratio());
  j["kl_mean"] = ref_number(s.kl_mean());
  j["kl_stderr"] = ref_number(s.kl_stderr());
  j["kl_median"] = ref_number(s.kl_percentile(50));
  j["kl_p99"] = ref_number(s.kl_percentile(99));
  j["kl_max"] = ref_number(s.kl_percentile(100));
  j["top1_agreement_pct"] = ref_number(100 * s.top1_agreement());
  nlohmann::ordered_json per_window = nlohmann::ordered_json::array();
  for (double v : s.window_perplexity) per_window.push_back(number(v));
  j["window_ppl"] = per_window;
  return j;
}

}  // namespace

Action add_bench_quality(CLI::App& bench) {
  auto o = std::make_shared<Options>();
  auto* cmd = bench.add_subcommand(
      "quality", "Perplexity on a text; with --ref, KL divergence and top-1 agreement");
  cmd->add_option("-m,--model", o->model, "GGUF file or Hugging Face model folder")->required();
  cmd->add_option("--ref", o->ref,
                  "Reference model with the same vocabulary (F16 of the same model, say)");
  cmd->add_option("--kv-type", o->kv_type,
                  "The model's KV cache: f32, f16, q8_0 or fp8 (f32: the weights alone are measured; "
                  "--ref with the same file and another --kv-type measures the cache)")
      ->capture_default_str()
      ->check(CLI::IsMember(kv_type_name_list()));
  cmd->add_option("--ref-kv-type", o->ref_kv_type, "The reference's KV cache type")
      ->capture_default_str()
      ->check(CLI::IsMember(kv_type_name_list()));
  cmd->add_option("-f,--file", o->file,
                  "Text file (default: $PAGODA_SHARED or ../shared, "
                  "testdata/text/tinystories_valid_head.txt)");
  cmd->add_option("-c,--ctx", o->ctx, "Tokens per window, BOS included")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--score", o->score,
                  "all: every prediction of a window counts; second-half: only those from "
                  "position ctx/2 on (llama.cpp's perplexity)")
      ->check(CLI::IsMember({"all", "second-half"}))
      ->capture_default_str();
  cmd->add_flag("--no-bos", o->no_bos, "Do not start windows with BOS (default: the model's rule)");
  cmd->add_option("--max-windows", o->max_windows, "Score at most N windows; 0 = all")
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
  cmd->add_option("--batch", o->batch, "Windows per forward step")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "Threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--backend,--device", o->backend, backend_help())
      ->check(CLI::IsMember(backend_names()))
      ->capture_default_str();
  cmd->add_option("--json", o->json, "Write the results as JSON to PATH (- = stdout)");
  cmd->add_option("--csv", o->csv, "Write the table as CSV to PATH (- = stdout)");
  return [o] {
    if (o->json == "-" && o->csv == "-") fail("--json and --csv cannot both go to stdout (-)");
    if (o->file.empty()) {
      o->file = default_text_path();
      if (!std::filesystem::exists(o->file)) {
        fail("no text to score: give --file TEXT (the default ", o->file, " does not exist)");
      }
    }
    Loaded model = load(o->model, o->ctx);
    Loaded ref;
    if (!o->ref.empty()) {
      ref = load(o->ref, o->ctx);
      check_same_vocab(*model.file, *ref.file);
    }
    auto tokenizer = Tokenizer::create(model.file->vocab());
    const Vocab& vocab = tokenizer->vocab();
    const std::string text = read_file(o->file);
    const std::vector<TokenId> ids = tokenizer->encode(text);
    const int64_t vocab_size = model.model->config().vocab_size;
    for (TokenId id : ids) {
      if (id < 0 || id >= vocab_size) {
        fail(o->model, ": the tokenizer gives token ", id, " but the model has ", vocab_size,
             " logits");
      }
    }

    bench::WindowOptions wo;
    wo.ctx = o->ctx;
    wo.bos = !o->no_bos && vocab.add_bos && vocab.valid(vocab.bos) ? vocab.bos : kNoToken;
    wo.second_half = o->score == "second-half";
    wo.max_windows = o->max_windows;
    const std::vector<bench::Window> windows = bench::make_windows(ids, wo);
    if (windows.empty()) {
      fail(o->file, ": ", ids.size(), " tokens, not enough for one window of --ctx ", o->ctx);
    }

    auto backend = make_backend(o->backend, o->threads);
    bench::WindowRunner runner(*model.model, *backend, o->ctx, o->batch, parse_kv_type(o->kv_type));
    std::unique_ptr<bench::WindowRunner> ref_runner;
    if (ref.model) {
      ref_runner = std::make_unique<bench::WindowRunner>(*ref.model, *backend, o->ctx, o->batch,
                                                         parse_kv_type(o->ref_kv_type));
    }

    // Ctrl-C from here on stops between steps and reports what was measured so far.
    g_interrupted = false;
    auto old_handler = std::signal(SIGINT, on_sigint);
    std::fprintf(stderr, "%s: %zu tokens, %zu windows of %d tokens (%s), scoring %s\n",
                 o->file.c_str(), ids.size(), windows.size(), o->ctx,
                 wo.bos == kNoToken ? "no BOS" : "BOS first",
                 wo.second_half ? "the second half" : "every prediction");
    bench::QualityStats stats;
    Progress progress(windows.size());
    const Clock::time_point start = Clock::now();
    size_t done = 0;
    while (done < windows.size() && !g_interrupted) {
      std::vector<const bench::Window*> step;
      const size_t end = std::min(windows.size(), done + static_cast<size_t>(o->batch));
      for (size_t w = done; w < end; ++w) step.push_back(&windows[w]);
      const std::vector<float>& logits = runner.run(step);
      const std::vector<float>* ref_logits = ref_runner ? &ref_runner->run(step) : nullptr;
      int64_t row = 0;
      for (const bench::Window* w : step) {
        bench::score_window(*w, logits.data() + row * vocab_size,
                            ref_logits ? ref_logits->data() + row * vocab_size : nullptr,
                            vocab_size, o->threads, stats);
        row += w->num_scored();
      }
      done += step.size();
      progress.update(done, stats.nll.count(), stats.nll.perplexity());
    }
    progress.finish();
    std::signal(SIGINT, old_handler);
    const double seconds = seconds_since(start);

    const bench::Table table = make_table(*o, stats, done);
    const bool stdout_taken = o->json == "-" || o->csv == "-";
    (stdout_taken ? std::cerr : std::cout) << table.to_text() << std::flush;
    std::fprintf(stderr, "%lld tokens scored in %.1f s (%.0f tokens/s%s)%s\n",
                 static_cast<long long>(stats.nll.count()), seconds,
                 stats.nll.count() / std::max(seconds, 1e-9), ref_runner ? ", both models" : "",
                 g_interrupted ? " | interrupted" : "");
    if (!o->json.empty()) {
      const auto j = make_json(*o, stats, done, ids.size(), wo.bos != kNoToken, seconds);
      bench::write_output(o->json, j.dump(2) + "\n");
    }
    if (!o->csv.empty()) bench::write_output(o->csv, table.to_csv());
    return g_interrupted ? 130 : 0;
  };
}

}  // namespace pagoda::cli
