// Prometheus text exposition of the server's metrics (see metrics.h).
#include "server/metrics.h"

#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <sstream>

namespace pagoda::server {
namespace {

using ModelStats = ServerMetrics::ModelStats;

// The shortest text that reads back as the same double ("0.1", not "0.10000000000000001").
std::string number(double v) {
  char buf[64];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

void header(std::ostringstream& out, const char* name, const char* type, const char* help) {
  out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
}

void counter(std::ostringstream& out, const char* name, const char* help, double value) {
  header(out, name, "counter", help);
  out << name << ' ' << number(value) << '\n';
}

}  // namespace

// Label text of one model's series: empty for a server of one model, {model="id"} (plus
// `extra`) otherwise.
std::string label(const std::string& key, const std::string& value) {
  std::string escaped;
  for (char c : value) {
    if (c == '"' || c == '\\') escaped += '\\';
    if (c == '\n') {
      escaped += "\\n";
      continue;
    }
    escaped += c;
  }
  return key + "=\"" + escaped + "\"";
}

std::string model_labels(const std::string& model, const std::string& extra) {
  if (model.empty()) return extra.empty() ? "" : "{" + extra + "}";
  std::string out = "{";
  out += label("model", model);
  if (!extra.empty()) out += "," + extra;
  out += "}";
  return out;
}

namespace {

// One metric with a series per model.
template <typename F>
void series(std::ostringstream& out, const char* name, const char* type, const char* help,
            const ModelStats& models, F value) {
  header(out, name, type, help);
  for (const auto& [id, stats] : models) out << name << model_labels(id) << ' ' << number(value(stats)) << '\n';
}

int64_t disk_hit_tokens(const EngineStats& s) {
  return s.scheduler.kv.num_lower_tier_hit_tokens - s.scheduler.kv.num_host_tier_hit_tokens;
}

// Where prompt tokens came from (the pool, host memory, the disk, or computed again after a
// preemption), for every model.
void render_swap_and_recompute(std::ostringstream& out, const ModelStats& models) {
  using S = const EngineStats&;
  series(out, "pagoda_prefix_cache_pool_hits_total", "counter",
         "Prompt tokens found in the KV cache's own blocks.", models, [](S s) {
           return double(s.scheduler.kv.num_hit_tokens - s.scheduler.kv.num_lower_tier_hit_tokens);
         });
  series(out, "pagoda_prefix_cache_host_hits_total", "counter",
         "Prompt tokens loaded back from the host-memory tier (--kv-offload-gb).", models,
         [](S s) { return double(s.scheduler.kv.num_host_tier_hit_tokens); });
  series(out, "pagoda_prefix_cache_disk_hits_total", "counter",
         "Prompt tokens loaded back from the disk tier (--kv-disk).", models,
         [](S s) { return double(disk_hit_tokens(s)); });
  series(out, "pagoda_recomputed_tokens_total", "counter",
         "Tokens a preemption dropped that were computed again (not found in a cache tier).",
         models, [](S s) { return double(s.scheduler.num_recomputed_tokens); });
}

// The host-memory tier (--kv-offload-gb), for the models that have one.
void render_kv_host(std::ostringstream& out, const ModelStats& all) {
  ModelStats models;
  for (const auto& m : all) {
    if (m.second.kv_host.enabled) models.push_back(m);
  }
  if (models.empty()) return;
  using S = const EngineStats&;
  series(out, "pagoda_kv_host_blocks", "gauge", "KV blocks held in the host-memory tier.", models,
         [](S s) { return double(s.kv_host.blocks); });
  series(out, "pagoda_kv_host_bytes", "gauge", "Bytes held in the host-memory tier.", models,
         [](S s) { return double(s.kv_host.bytes); });
  series(out, "pagoda_kv_host_stored_blocks_total", "counter",
         "KV blocks copied to host memory when the KV cache evicted them.", models,
         [](S s) { return double(s.kv_host.stored_blocks); });
  series(out, "pagoda_kv_host_hit_blocks_total", "counter",
         "KV blocks copied back from host memory into the KV cache.", models,
         [](S s) { return double(s.kv_host.hit_blocks); });
  series(out, "pagoda_kv_host_evicted_blocks_total", "counter",
         "KV blocks dropped from host memory past --kv-offload-gb.", models,
         [](S s) { return double(s.kv_host.evicted_blocks); });
  series(out, "pagoda_kv_host_max_bytes", "gauge", "The host-memory tier's bound.", models,
         [](S s) { return double(s.kv_host.max_bytes); });
  series(out, "pagoda_kv_host_loads_total", "counter",
         "Loads of waiting requests' blocks from the host-memory tier (and the disk under it).",
         models, [](S s) { return double(s.kv_loads.loads); });
  series(out, "pagoda_kv_host_load_seconds_total", "counter",
         "Time from a load's start to its blocks landing in the KV cache, all loads.", models,
         [](S s) { return s.kv_loads.seconds; });
  series(out, "pagoda_kv_host_load_seconds_max", "gauge", "The longest load.", models,
         [](S s) { return s.kv_loads.max_seconds; });
}

// The disk tier under the prefix cache (--kv-disk), for the models that have one.
void render_kv_disk(std::ostringstream& out, const ModelStats& all) {
  ModelStats models;
  for (const auto& m : all) {
    if (m.second.kv_disk.enabled) models.push_back(m);
  }
  if (models.empty()) return;
  using S = const EngineStats&;
  series(out, "pagoda_kv_disk_hit_tokens_total", "counter",
         "Prompt tokens whose K/V was read from the disk tier.", models,
         [](S s) { return double(disk_hit_tokens(s)); });
  series(out, "pagoda_kv_disk_hit_blocks_total", "counter", "KV blocks read from the disk tier.",
         models, [](S s) { return double(s.kv_disk.hit_blocks); });
  series(out, "pagoda_kv_disk_written_blocks_total", "counter",
         "KV blocks written to the disk tier.", models,
         [](S s) { return double(s.kv_disk.written_blocks); });
  series(out, "pagoda_kv_disk_written_bytes_total", "counter", "Bytes written to the disk tier.",
         models, [](S s) { return double(s.kv_disk.bytes_written); });
  series(out, "pagoda_kv_disk_read_bytes_total", "counter", "Bytes read from the disk tier.",
         models, [](S s) { return double(s.kv_disk.bytes_read); });
  series(out, "pagoda_kv_disk_dropped_writes_total", "counter",
         "KV blocks not written: the write-behind queue was full.", models,
         [](S s) { return double(s.kv_disk.dropped_writes); });
  series(out, "pagoda_kv_disk_write_failures_total", "counter",
         "KV block writes the disk refused (full, read-only, removed).", models,
         [](S s) { return double(s.kv_disk.write_failures); });
  series(out, "pagoda_kv_disk_corrupt_records_total", "counter",
         "Disk tier records that did not read back (a miss; deleted).", models,
         [](S s) { return double(s.kv_disk.corrupt_records); });
  series(out, "pagoda_kv_disk_evicted_blocks_total", "counter",
         "Disk tier records deleted past --kv-disk-gb, least recently used first.", models,
         [](S s) { return double(s.kv_disk.evicted_blocks); });
  series(out, "pagoda_kv_disk_loads_total", "counter", "Block reads from the disk tier.", models,
         [](S s) { return double(s.kv_disk.num_loads); });
  series(out, "pagoda_kv_disk_load_seconds_total", "counter",
         "Time the reader thread spent reading blocks from the disk tier.", models,
         [](S s) { return s.kv_disk.load_seconds; });
  series(out, "pagoda_kv_disk_load_seconds_max", "gauge",
         "The longest block read from the disk tier.", models,
         [](S s) { return s.kv_disk.max_load_seconds; });
  series(out, "pagoda_kv_disk_loads_in_flight", "gauge",
         "Reads of waiting requests' blocks from the disk tier not landed yet.", models,
         [](S s) { return double(s.scheduler.kv.num_lower_tier_loads); });
  series(out, "pagoda_kv_disk_blocks", "gauge", "KV blocks on the disk tier (this model's).",
         models, [](S s) { return double(s.kv_disk.records); });
  series(out, "pagoda_kv_disk_bytes", "gauge", "Bytes on the disk tier (this model's).", models,
         [](S s) { return double(s.kv_disk.bytes); });
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

std::string Histogram::render(const std::string& name) const {
  std::ostringstream out;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out << name << "_bucket{le=\"" << number(bounds_[i]) << "\"} " << cumulative << '\n';
  }
  out << name << "_bucket{le=\"+Inf\"} " << count_ << '\n';
  out << name << "_sum " << number(sum_) << '\n' << name << "_count " << count_ << '\n';
  return out.str();
}

ServerMetrics::ServerMetrics()
    : ttft_({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      tpot_({0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1, 2.5}),
      e2e_({0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}) {}

void ServerMetrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard lock(mutex_);
  ++requests_[{endpoint, status}];
}

void ServerMetrics::record_generation(int64_t prompt_tokens, int64_t generated_tokens,
                                      double ttft_s, double tpot_s, double e2e_s) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += static_cast<uint64_t>(prompt_tokens);
  generated_tokens_ += static_cast<uint64_t>(generated_tokens);
  if (ttft_s >= 0) ttft_.observe(ttft_s);
  if (tpot_s >= 0) tpot_.observe(tpot_s);
  if (e2e_s >= 0) e2e_.observe(e2e_s);
}

void ServerMetrics::record_adapter(const std::string& adapter, int64_t prompt_tokens,
                                   int64_t generated_tokens) {
  std::lock_guard lock(mutex_);
  AdapterCounts& c = adapters_[adapter];
  ++c.requests;
  c.prompt_tokens += static_cast<uint64_t>(prompt_tokens);
  c.generated_tokens += static_cast<uint64_t>(generated_tokens);
}

void ServerMetrics::forget_adapter(const std::string& adapter) {
  std::lock_guard lock(mutex_);
  adapters_.erase(adapter);
}

std::string ServerMetrics::render(const EngineStats& stats) const {
  return render(ModelStats{{"", stats}});
}

std::string ServerMetrics::render(const ModelStats& models) const {
  std::lock_guard lock(mutex_);
  std::ostringstream out;
  header(out, "pagoda_requests_total", "counter", "HTTP requests by endpoint and status code.");
  for (const auto& [key, count] : requests_) {
    out << "pagoda_requests_total{endpoint=\"" << key.first << "\",status=\"" << key.second
        << "\"} " << count << '\n';
  }
  counter(out, "pagoda_prompt_tokens_total", "Prompt tokens of finished requests.",
          double(prompt_tokens_));
  counter(out, "pagoda_generation_tokens_total", "Tokens generated for finished requests.",
          double(generated_tokens_));
  if (!adapters_.empty()) {
    const std::pair<const char*, uint64_t AdapterCounts::*> per_adapter[] = {
        {"pagoda_lora_requests_total", &AdapterCounts::requests},
        {"pagoda_lora_prompt_tokens_total", &AdapterCounts::prompt_tokens},
        {"pagoda_lora_generation_tokens_total", &AdapterCounts::generated_tokens}};
    const char* help[] = {"Finished requests of each loaded LoRA adapter.",
                          "Prompt tokens of each loaded LoRA adapter's finished requests.",
                          "Tokens generated for each loaded LoRA adapter's finished requests."};
    for (size_t i = 0; i < std::size(per_adapter); ++i) {
      header(out, per_adapter[i].first, "counter", help[i]);
      for (const auto& [name, c] : adapters_) {
        out << per_adapter[i].first << '{' << label("adapter", name) << "} "
            << c.*(per_adapter[i].second) << '\n';
      }
    }
  }
  counter(out, "pagoda_aborted_requests_total",
          "Requests ended early because the client went away.", double(num_aborted_));
  header(out, "pagoda_time_to_first_token_seconds", "histogram",
         "From request arrival to its first output token.");
  out << ttft_.render("pagoda_time_to_first_token_seconds");
  header(out, "pagoda_time_per_output_token_seconds", "histogram",
         "Mean time between output tokens of a request, after the first.");
  out << tpot_.render("pagoda_time_per_output_token_seconds");
  header(out, "pagoda_e2e_request_latency_seconds", "histogram",
         "From request arrival to its last output token.");
  out << e2e_.render("pagoda_e2e_request_latency_seconds");
  render_engines(out, models);
  return out.str();
}

void ServerMetrics::render_engines(std::ostringstream& out, const ModelStats& models) {
  using S = const EngineStats&;
  series(out, "pagoda_num_requests_running", "gauge", "Sequences in the running batch.", models,
         [](S s) { return double(s.scheduler.num_running); });
  series(out, "pagoda_num_requests_waiting", "gauge", "Sequences waiting to be scheduled.", models,
         [](S s) { return double(s.scheduler.num_waiting); });
  series(out, "pagoda_kv_blocks_total", "gauge", "KV cache blocks.", models,
         [](S s) { return double(s.scheduler.kv.num_blocks); });
  series(out, "pagoda_kv_blocks_used", "gauge", "KV cache blocks held by requests.", models,
         [](S s) { return double(s.scheduler.kv.num_used_blocks); });
  series(out, "pagoda_kv_blocks_free", "gauge", "KV cache blocks free (cached ones included).",
         models, [](S s) { return double(s.scheduler.kv.num_free_blocks); });
  series(out, "pagoda_kv_blocks_cached", "gauge", "Free KV blocks still holding a cached prefix.",
         models, [](S s) { return double(s.scheduler.kv.num_cached_blocks); });
  series(out, "pagoda_kv_cache_usage_ratio", "gauge", "Used KV blocks / all KV blocks.", models,
         [](S s) { return s.scheduler.kv.utilization(); });
  series(out, "pagoda_prefix_cache_hit_rate", "gauge",
         "Prompt tokens found in the prefix cache / looked up.", models,
         [](S s) { return s.scheduler.kv.prefix_hit_rate(); });
  series(out, "pagoda_prefix_cache_queries_total", "counter",
         "Prompt tokens looked up in the prefix cache.", models,
         [](S s) { return double(s.scheduler.kv.num_queried_tokens); });
  series(out, "pagoda_prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.",
         models, [](S s) { return double(s.scheduler.kv.num_hit_tokens); });
  series(out, "pagoda_num_preemptions_total", "counter",
         "Sequences preempted when KV blocks ran out.", models,
         [](S s) { return double(s.scheduler.num_preemptions); });
  series(out, "pagoda_engine_steps_total", "counter", "Engine steps run.", models,
         [](S s) { return double(s.scheduler.num_steps); });
  series(out, "pagoda_computed_tokens_total", "counter", "Token rows run through the model.",
         models, [](S s) { return double(s.num_computed_tokens); });
  series(out, "pagoda_kv_cache_bytes", "gauge", "Bytes of K/V memory.", models,
         [](S s) { return double(s.kv_cache_bytes); });
  render_swap_and_recompute(out, models);
  render_kv_host(out, models);
  render_kv_disk(out, models);
  series(out, "pagoda_spec_proposed_tokens_total", "counter",
         "Speculative tokens proposed and verified.", models,
         [](S s) { return double(s.speculative.num_proposed); });
  series(out, "pagoda_spec_accepted_tokens_total", "counter", "Speculative tokens accepted.",
         models, [](S s) { return double(s.speculative.num_accepted); });
  series(out, "pagoda_spec_trimmed_tokens_total", "counter",
         "Speculative tokens not proposed for the step's bound (a hybrid model's state snapshots).",
         models, [](S s) { return double(s.speculative.num_trimmed); });
  series(out, "pagoda_spec_verify_steps_total", "counter",
         "Sequence-steps that verified at least one proposal.", models,
         [](S s) { return double(s.speculative.num_verify_steps); });
  series(out, "pagoda_spec_acceptance_rate", "gauge", "Accepted / proposed speculative tokens.",
         models, [](S s) { return s.speculative.acceptance_rate(); });
  series(out, "pagoda_spec_mean_accepted_length", "gauge",
         "Tokens per verifying step: accepted proposals and the token after them.", models,
         [](S s) { return s.speculative.mean_accepted_length(); });
  header(out, "pagoda_spec_accepted_at_position_total", "counter",
         "Proposals accepted, by their position after the last known token.");
  for (const auto& [id, s] : models) {
    const auto& at = s.speculative.accepted_at;
    for (size_t i = 0; i < at.size(); ++i) {
      out << "pagoda_spec_accepted_at_position_total"
          << model_labels(id, "position=\"" + std::to_string(i) + "\"") << ' ' << at[i] << '\n';
    }
  }
  header(out, "pagoda_spec_proposed_at_position_total", "counter",
         "Proposals verified, by their position after the last known token.");
  for (const auto& [id, s] : models) {
    const auto& at = s.speculative.proposed_at;
    for (size_t i = 0; i < at.size(); ++i) {
      out << "pagoda_spec_proposed_at_position_total"
          << model_labels(id, "position=\"" + std::to_string(i) + "\"") << ' ' << at[i] << '\n';
    }
  }
}

}  // namespace pagoda::server
