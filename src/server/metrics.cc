// Prometheus text exposition of the server's metrics (see metrics.h).
#include "server/metrics.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace pagoda::server {
namespace {

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

void gauge(std::ostringstream& out, const char* name, const char* help, double value) {
  header(out, name, "gauge", help);
  out << name << ' ' << number(value) << '\n';
}

void counter(std::ostringstream& out, const char* name, const char* help, double value) {
  header(out, name, "counter", help);
  out << name << ' ' << number(value) << '\n';
}

// The disk tier under the prefix cache (--kv-disk).
void render_kv_disk(std::ostringstream& out, const EngineStats& stats) {
  const KvDiskStats& d = stats.kv_disk;
  counter(out, "pagoda_kv_disk_hit_tokens_total",
          "Prompt tokens whose K/V was read from the disk tier.",
          double(stats.scheduler.kv.num_lower_tier_hit_tokens));
  counter(out, "pagoda_kv_disk_hit_blocks_total", "KV blocks read from the disk tier.",
          double(d.hit_blocks));
  counter(out, "pagoda_kv_disk_written_blocks_total", "KV blocks written to the disk tier.",
          double(d.written_blocks));
  counter(out, "pagoda_kv_disk_written_bytes_total", "Bytes written to the disk tier.",
          double(d.bytes_written));
  counter(out, "pagoda_kv_disk_read_bytes_total", "Bytes read from the disk tier.",
          double(d.bytes_read));
  counter(out, "pagoda_kv_disk_dropped_writes_total",
          "KV blocks not written: the write-behind queue was full.", double(d.dropped_writes));
  counter(out, "pagoda_kv_disk_write_failures_total",
          "KV block writes the disk refused (full, read-only, removed).",
          double(d.write_failures));
  counter(out, "pagoda_kv_disk_corrupt_records_total",
          "Disk tier records that did not read back (a miss; deleted).",
          double(d.corrupt_records));
  counter(out, "pagoda_kv_disk_evicted_blocks_total",
          "Disk tier records deleted past --kv-disk-gb, least recently used first.",
          double(d.evicted_blocks));
  counter(out, "pagoda_kv_disk_loads_total", "Block reads from the disk tier.",
          double(d.num_loads));
  counter(out, "pagoda_kv_disk_load_seconds_total", "Time spent reading blocks from the disk tier.",
          d.load_seconds);
  gauge(out, "pagoda_kv_disk_load_seconds_max", "The longest block read from the disk tier.",
        d.max_load_seconds);
  gauge(out, "pagoda_kv_disk_blocks", "KV blocks on the disk tier (this model's).",
        double(d.records));
  gauge(out, "pagoda_kv_disk_bytes", "Bytes on the disk tier (this model's).", double(d.bytes));
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

std::string ServerMetrics::render(const EngineStats& stats) const {
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
  const SchedulerStats& s = stats.scheduler;
  gauge(out, "pagoda_num_requests_running", "Sequences in the running batch.", s.num_running);
  gauge(out, "pagoda_num_requests_waiting", "Sequences waiting to be scheduled.", s.num_waiting);
  gauge(out, "pagoda_kv_blocks_total", "KV cache blocks.", s.kv.num_blocks);
  gauge(out, "pagoda_kv_blocks_used", "KV cache blocks held by requests.", s.kv.num_used_blocks);
  gauge(out, "pagoda_kv_blocks_free", "KV cache blocks free (cached ones included).",
        s.kv.num_free_blocks);
  gauge(out, "pagoda_kv_blocks_cached", "Free KV blocks still holding a cached prefix.",
        s.kv.num_cached_blocks);
  gauge(out, "pagoda_kv_cache_usage_ratio", "Used KV blocks / all KV blocks.",
        s.kv.utilization());
  gauge(out, "pagoda_prefix_cache_hit_rate", "Prompt tokens found in the prefix cache / looked up.",
        s.kv.prefix_hit_rate());
  counter(out, "pagoda_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
          double(s.kv.num_queried_tokens));
  counter(out, "pagoda_prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
          double(s.kv.num_hit_tokens));
  counter(out, "pagoda_num_preemptions_total", "Sequences preempted when KV blocks ran out.",
          double(s.num_preemptions));
  counter(out, "pagoda_engine_steps_total", "Engine steps run.", double(s.num_steps));
  counter(out, "pagoda_computed_tokens_total", "Token rows run through the model.",
          double(stats.num_computed_tokens));
  gauge(out, "pagoda_kv_cache_bytes", "Bytes of K/V memory.", double(stats.kv_cache_bytes));
  if (stats.kv_disk.enabled) render_kv_disk(out, stats);
  const SpeculativeStats& sp = stats.speculative;
  counter(out, "pagoda_spec_proposed_tokens_total", "Speculative tokens proposed and verified.",
          double(sp.num_proposed));
  counter(out, "pagoda_spec_accepted_tokens_total", "Speculative tokens accepted.",
          double(sp.num_accepted));
  counter(out, "pagoda_spec_verify_steps_total",
          "Sequence-steps that verified at least one proposal.", double(sp.num_verify_steps));
  gauge(out, "pagoda_spec_acceptance_rate", "Accepted / proposed speculative tokens.",
        sp.acceptance_rate());
  gauge(out, "pagoda_spec_mean_accepted_length",
        "Tokens per verifying step: accepted proposals and the token after them.",
        sp.mean_accepted_length());
  header(out, "pagoda_spec_accepted_at_position_total", "counter",
         "Proposals accepted, by their position after the last known token.");
  for (size_t i = 0; i < sp.accepted_at.size(); ++i) {
    out << "pagoda_spec_accepted_at_position_total{position=\"" << i << "\"} "
        << sp.accepted_at[i] << '\n';
  }
  header(out, "pagoda_spec_proposed_at_position_total", "counter",
         "Proposals verified, by their position after the last known token.");
  for (size_t i = 0; i < sp.proposed_at.size(); ++i) {
    out << "pagoda_spec_proposed_at_position_total{position=\"" << i << "\"} "
        << sp.proposed_at[i] << '\n';
  }
  return out.str();
}

}  // namespace pagoda::server
