#include "planner/serving_sim.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <numeric>
#include <random>

#include "core/error.h"

namespace pagoda {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Running {
  size_t index;              // into the request list
  int64_t num_computed = 0;  // tokens whose K/V exist
  int64_t num_sampled = 0;
};

}  // namespace

double SimRequestResult::tpot_s() const {
  if (num_output_tokens < 2) return kNaN;
  return (last_token_s - first_token_s) / static_cast<double>(num_output_tokens - 1);
}

double SimResult::mean_ttft_s() const {
  double sum = 0;
  for (const auto& r : requests) sum += r.ttft_s();
  return requests.empty() ? kNaN : sum / static_cast<double>(requests.size());
}

double SimResult::mean_tpot_s() const {
  double sum = 0;
  int64_t n = 0;
  for (const auto& r : requests) {
    if (r.num_output_tokens >= 2) {
      sum += r.tpot_s();
      ++n;
    }
  }
  return n ? sum / static_cast<double>(n) : kNaN;
}

namespace {

struct Chunk {
  size_t slot;  // into SimState::running
  int64_t num_new;
};

// The scheduler's state between steps.
struct SimState {
  std::deque<size_t> waiting;    // request indices, arrival order
  std::vector<Running> running;  // admission order
  uint64_t kv_used = 0;          // K/V slots reserved by running requests
  size_t num_finished = 0;
};

// pagoda's policy for one step: running requests first, oldest first, each its remaining prompt
// (cut to what is left of the budget) or one token; then waiting requests while the budget,
// the sequence slots and the K/V slots for their whole length last.
std::vector<Chunk> schedule_step(SimState& st, const std::vector<SimRequest>& requests,
                                 const SimEngine& engine) {
  std::vector<Chunk> chunks;
  int64_t budget = engine.max_num_batched_tokens;
  for (size_t s = 0; s < st.running.size() && budget > 0; ++s) {
    const Running& r = st.running[s];
    const int64_t prompt = requests[r.index].prompt_len;
    const int64_t take = std::min(r.num_computed < prompt ? prompt - r.num_computed : 1, budget);
    budget -= take;
    chunks.push_back({s, take});
  }
  while (budget > 0 && !st.waiting.empty() &&
         static_cast<int64_t>(st.running.size()) < engine.max_num_seqs) {
    const SimRequest& r = requests[st.waiting.front()];
    const uint64_t slots = static_cast<uint64_t>(r.prompt_len + r.output_len);
    if (st.kv_used + slots > engine.kv_capacity_tokens) break;
    st.kv_used += slots;
    st.running.push_back({st.waiting.front(), 0, 0});
    st.waiting.pop_front();
    const int64_t take = std::min(r.prompt_len, budget);
    budget -= take;
    chunks.push_back({st.running.size() - 1, take});
  }
  return chunks;
}

// The step's time and the share of it that its prompt tokens take.
std::pair<double, double> price_step(const SimState& st, const std::vector<Chunk>& chunks,
                                     const std::vector<SimRequest>& requests, const ModelCost& cost,
                                     const DeviceRates& rates, int64_t* num_prompt_tokens) {
  StepLoad load, prompt_load, decode_load;
  for (const Chunk& c : chunks) {
    const Running& r = st.running[c.slot];
    const int64_t prompt = requests[r.index].prompt_len;
    const int64_t context = r.num_computed + c.num_new;
    const bool samples = context >= prompt;
    load.add_request(cost, c.num_new, context, samples);
    (r.num_computed < prompt ? prompt_load : decode_load)
        .add_request(cost, c.num_new, context, samples);
  }
  const double t_prompt = prompt_load.num_tokens ? step_time(cost, rates, prompt_load).total_s : 0;
  const double t_decode = decode_load.num_tokens ? step_time(cost, rates, decode_load).total_s : 0;
  *num_prompt_tokens = prompt_load.num_tokens;
  return {step_time(cost, rates, load).total_s, t_prompt / (t_prompt + t_decode)};
}

// Applies a step that ended at `now`: K/V computed, one token sampled by each sequence whose
// prompt is done; finished requests leave, the others keep their admission order.
void commit_step(SimState& st, const std::vector<Chunk>& chunks,
                 const std::vector<SimRequest>& requests, double now, SimResult& out) {
  for (const Chunk& c : chunks) {
    Running& r = st.running[c.slot];
    const SimRequest& q = requests[r.index];
    r.num_computed += c.num_new;
    if (r.num_computed < q.prompt_len) continue;
    SimRequestResult& res = out.requests[r.index];
    if (r.num_sampled == 0) res.first_token_s = now;
    res.last_token_s = now;
    res.num_output_tokens = ++r.num_sampled;
    ++out.num_output_tokens;
  }
  size_t kept = 0;
  for (size_t s = 0; s < st.running.size(); ++s) {
    const SimRequest& q = requests[st.running[s].index];
    if (st.running[s].num_sampled >= q.output_len) {
      st.kv_used -= static_cast<uint64_t>(q.prompt_len + q.output_len);
      ++st.num_finished;
    } else {
      st.running[kept++] = st.running[s];
    }
  }
  st.running.resize(kept);
}

}  // namespace

SimResult simulate(std::vector<SimRequest> requests, const SimEngine& engine, const ModelCost& cost,
                   const DeviceRates& rates) {
  if (engine.max_num_seqs < 1 || engine.max_num_batched_tokens < 1) {
    fail("estimate: max_num_seqs and max_num_batched_tokens must be at least 1");
  }
  for (const SimRequest& r : requests) {
    if (r.prompt_len < 1 || r.output_len < 1) {
      fail("estimate: a request needs a prompt and an output of at least one token");
    }
    if (static_cast<uint64_t>(r.prompt_len + r.output_len) > engine.kv_capacity_tokens) {
      fail("estimate: a request of ", r.prompt_len, " + ", r.output_len,
           " tokens does not fit the ", engine.kv_capacity_tokens, " K/V slots left on a device");
    }
  }
  SimResult out;
  out.requests.resize(requests.size());
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return requests[a].arrival_s < requests[b].arrival_s;
  });
  for (size_t i = 0; i < requests.size(); ++i) out.requests[i].arrival_s = requests[i].arrival_s;

  SimState st;
  size_t next_arrival = 0;
  double now = requests.empty() ? 0 : requests[order[0]].arrival_s;
  while (st.num_finished < requests.size()) {
    while (next_arrival < order.size() && requests[order[next_arrival]].arrival_s <= now) {
      st.waiting.push_back(order[next_arrival++]);
    }
    if (st.running.empty() && st.waiting.empty()) {
      now = requests[order[next_arrival]].arrival_s;
      continue;
    }
    const std::vector<Chunk> chunks = schedule_step(st, requests, engine);
    if (chunks.empty()) fail("estimate: internal: a step with nothing to compute");
    int64_t num_prompt_tokens = 0;
    const auto [t, prompt_share] =
        price_step(st, chunks, requests, cost, rates, &num_prompt_tokens);
    now += t;
    out.busy_s += t;
    out.prefill_s += t * prompt_share;
    out.decode_s += t * (1 - prompt_share);
    ++out.num_steps;
    out.num_prompt_tokens += num_prompt_tokens;
    commit_step(st, chunks, requests, now, out);
  }
  out.end_s = now;
  return out;
}

std::vector<int64_t> batch_sizes(int64_t max_batch) {
  std::vector<int64_t> sizes;
  for (int64_t b = 1; b < max_batch; b *= 2) sizes.push_back(b);
  if (max_batch >= 1) sizes.push_back(max_batch);
  return sizes;
}

BatchPoint batch_point(const ModelCost& cost, const DeviceRates& rates, int64_t batch,
                       int64_t prompt_len, int64_t output_len, int64_t max_num_batched_tokens) {
  BatchPoint p;
  p.batch = batch;
  StepLoad decode;
  const int64_t context = prompt_len + output_len / 2;
  for (int64_t i = 0; i < batch; ++i) decode.add_request(cost, 1, context, true);
  const StepTime t = step_time(cost, rates, decode);
  p.decode_step_s = t.total_s;
  p.decode_compute_bound = t.matmul_compute_bound;
  p.decode_tokens_per_s = static_cast<double>(batch) / t.total_s;
  SimEngine engine;
  engine.max_num_seqs = batch;
  engine.max_num_batched_tokens = max_num_batched_tokens;
  const SimResult prefill =
      simulate(std::vector<SimRequest>(batch, {0, prompt_len, 1}), engine, cost, rates);
  p.ttft_mean_s = prefill.mean_ttft_s();
  p.ttft_last_s = prefill.end_s;
  p.prefill_tokens_per_s = static_cast<double>(batch * prompt_len) / prefill.end_s;
  return p;
}

double percentile_of(std::vector<double> values, double p) {
  values.erase(
      std::remove_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); }),
      values.end());
  if (values.empty()) return kNaN;
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - static_cast<double>(lo));
}

CapacityResult find_capacity(const std::vector<std::pair<int64_t, int64_t>>& lengths,
                             const SimEngine& engine, const ModelCost& cost,
                             const DeviceRates& rates, const ServiceLevel& slo) {
  if (lengths.empty()) fail("estimate: the workload has no requests");
  CapacityResult c;
  // Unit-rate Poisson arrival times, divided by each rate tried: the same draws for every rate,
  // so a higher rate is the same sequence compressed.
  std::mt19937_64 rng(0);
  std::exponential_distribution<double> gap(1.0);
  std::vector<double> unit_arrivals(lengths.size());
  double t = 0;
  for (double& a : unit_arrivals) {
    a = t;
    t += gap(rng);
  }
  auto requests_at = [&](double qps) {
    std::vector<SimRequest> r(lengths.size());
    for (size_t i = 0; i < r.size(); ++i) {
      r[i] = {qps > 0 ? unit_arrivals[i] / qps : 0, lengths[i].first, lengths[i].second};
    }
    return r;
  };
  struct Trial {
    SimResult sim;
    double ttft, tpot;
    bool ttft_ok, tpot_ok;
  };
  auto trial = [&](double qps) {
    Trial x{simulate(requests_at(qps), engine, cost, rates), 0, 0, false, false};
    std::vector<double> ttft, tpot;
    for (const auto& r : x.sim.requests) {
      ttft.push_back(r.ttft_s());
      tpot.push_back(r.tpot_s());
    }
    x.ttft = percentile_of(ttft, slo.percentile);
    x.tpot = percentile_of(tpot, slo.percentile);
    x.ttft_ok = x.ttft <= slo.ttft_s;
    x.tpot_ok = std::isnan(x.tpot) || x.tpot <= slo.tpot_s;  // one-token outputs have no TPOT
    return x;
  };

  const SimResult alone = simulate({{0, lengths[0].first, lengths[0].second}}, engine, cost, rates);
  c.alone_ttft_s = alone.requests[0].ttft_s();
  c.alone_tpot_s = alone.requests[0].tpot_s();
  const SimResult saturated = simulate(requests_at(0), engine, cost, rates);
  c.saturated_qps = static_cast<double>(lengths.size()) / saturated.end_s;
  c.saturated_prefill_share = saturated.busy_s > 0 ? saturated.prefill_s / saturated.busy_s : 0;

  // No rate above the saturated one can be sustained: its queue only grows.
  double lo = c.saturated_qps * 1e-3, hi = c.saturated_qps;
  Trial best = trial(lo);
  if (!best.ttft_ok || !best.tpot_ok) {
    c.limit = "nothing meets";
    return c;
  }
  const Trial top = trial(hi);
  Trial failed = top;
  if (top.ttft_ok && top.tpot_ok) {
    best = top;
    lo = hi;
    c.limit = "throughput";
  } else {
    while (hi / lo > 1.01) {
      const double mid = std::sqrt(lo * hi);
      Trial x = trial(mid);
      if (x.ttft_ok && x.tpot_ok) {
        lo = mid;
        best = std::move(x);
      } else {
        hi = mid;
        failed = std::move(x);
      }
    }
    c.limit = !failed.ttft_ok ? "TTFT" : "TPOT";
  }
  c.max_qps = lo;
  c.ttft_at_max_s = best.ttft;
  c.tpot_at_max_s = best.tpot;
  c.mean_concurrency_at_max = 0;
  double prompt_sum = 0, output_sum = 0;
  for (const auto& [p, o] : lengths) {
    prompt_sum += static_cast<double>(p);
    output_sum += static_cast<double>(o);
  }
  const double n = static_cast<double>(lengths.size());
  c.input_tokens_per_s = c.max_qps * prompt_sum / n;
  c.output_tokens_per_s = c.max_qps * output_sum / n;
  c.prefill_share = best.sim.busy_s > 0 ? best.sim.prefill_s / best.sim.busy_s : 0;
  // Little's law over the run: sequences in flight = (sum of their times in the system) / time.
  double in_system = 0;
  for (const auto& r : best.sim.requests) in_system += r.last_token_s - r.arrival_s;
  c.mean_concurrency_at_max = best.sim.end_s > 0 ? in_system / best.sim.end_s : 0;
  return c;
}

CostFigures cost_per_token(double usd_per_hour, double qps, double mean_prompt_len,
                           double mean_output_len, double prefill_share) {
  CostFigures f;
  f.usd_per_hour = usd_per_hour;
  if (qps <= 0) return f;
  const double usd_per_s = usd_per_hour / 3600.0;
  f.usd_per_million_tokens = usd_per_s / (qps * (mean_prompt_len + mean_output_len)) * 1e6;
  f.usd_per_million_input = usd_per_s * prefill_share / (qps * mean_prompt_len) * 1e6;
  f.usd_per_million_output = usd_per_s * (1 - prefill_share) / (qps * mean_output_len) * 1e6;
  return f;
}

}  // namespace pagoda
