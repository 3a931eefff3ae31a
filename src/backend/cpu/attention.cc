// Paged causal attention. A work item is one token, one KV head and up to four of the query
// heads that share it (grouped-query attention), so each cached key and value is read once for
// all of them: scores through the level's qk tile, a softmax per query head, and the weighted
// sum of values through the pv tile. K/V rows are read through the block table, one run of
// consecutive slots (within a cache block) at a time.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/ops.h"
#include "core/error.h"

namespace pagoda::cpu {
namespace {

// Calls f(first position, count, first slot) for each run of positions [first, last] that lies
// in one cache block, so slots within a run are consecutive.
template <typename F>
void for_each_run(const int32_t* table, int32_t block_size, int32_t first, int32_t last, F f) {
  for (int32_t j = first; j <= last;) {
    const int32_t block = j / block_size;
    const int32_t run = std::min(last + 1, (block + 1) * block_size) - j;
    f(j, run, static_cast<int64_t>(table[block]) * block_size + j % block_size);
    j += run;
  }
}

}  // namespace

void attention(const Kernels& k, const float* q, KvLayer cache, const AttentionBatch& batch,
               const AttentionParams& p, float* out, ThreadPool& pool) {
  const int32_t num_tokens = batch.num_tokens;
  if (num_tokens <= 0) return;
  if (p.num_kv_heads <= 0 || p.num_heads % p.num_kv_heads != 0) {
    fail("attention: ", p.num_heads, " heads do not divide into ", p.num_kv_heads, " KV heads");
  }
  const int64_t head_dim = p.head_dim;
  const int64_t kv_stride = static_cast<int64_t>(p.num_kv_heads) * head_dim;
  const int32_t group = p.num_heads / p.num_kv_heads;

  // Sequence of each token, and the work to decide on threads.
  std::vector<int32_t> seq_of(static_cast<size_t>(num_tokens));
  int64_t work = 0;
  int32_t max_context = 1;
  for (int32_t s = 0; s < batch.num_seqs; ++s) {
    for (int32_t t = batch.query_start[s]; t < batch.query_start[s + 1]; ++t) {
      seq_of[t] = s;
      const int32_t context = batch.positions[t] + 1;
      max_context = std::max(max_context, context);
      work += int64_t{context} * head_dim * p.num_heads * 2;
    }
  }
  const bool threaded = pool.num_threads() > 1 && worth_threads(work);
  // Query heads per item: a whole group (up to the tile size), split further only when there
  // are too few (token, KV head) pairs to keep the threads busy.
  const int64_t num_pairs = int64_t{num_tokens} * p.num_kv_heads;
  int32_t heads_per_item = std::min(group, kMaxTileQueries);
  if (threaded && num_pairs < pool.num_threads()) {
    const int64_t parts = std::min<int64_t>(group, (pool.num_threads() + num_pairs - 1) / num_pairs);
    heads_per_item = std::min<int32_t>(heads_per_item, static_cast<int32_t>((group + parts - 1) / parts));
  }
  const int32_t items_per_group = (group + heads_per_item - 1) / heads_per_item;
  const int64_t num_items = num_pairs * items_per_group;

  const bool f16 = cache.type == DType::kF16;
  const size_t num_scratch = static_cast<size_t>(threaded ? pool.num_threads() : 1);
  std::vector<std::vector<float>> scratch(num_scratch);
  std::vector<std::vector<float>> rows(num_scratch);  // F16: one run of K or V rows, as float
  const auto run_item = [&](int64_t item, int thread) {
    const auto t = static_cast<int32_t>(item / (int64_t{p.num_kv_heads} * items_per_group));
    const auto kv_head = static_cast<int32_t>(item / items_per_group % p.num_kv_heads);
    const int32_t h0 = kv_head * group + static_cast<int32_t>(item % items_per_group) * heads_per_item;
    const int32_t num_queries = std::min(heads_per_item, (kv_head + 1) * group - h0);

    const int32_t* table = batch.block_table + static_cast<int64_t>(seq_of[t]) * batch.max_blocks_per_seq;
    const int32_t pos = batch.positions[t];
    const int32_t first = p.window > 0 ? std::max(0, pos - p.window + 1) : 0;
    const int32_t n = pos - first + 1;
    const float* qh = q + (int64_t{t} * p.num_heads + h0) * head_dim;
    float* oh = out + (int64_t{t} * p.num_heads + h0) * head_dim;
    const int64_t head_offset = int64_t{kv_head} * head_dim;
    // The rows of a run as float: the cache itself (F32), or converted into `rows` (F16).
    std::vector<float>& row_buf = rows[thread];
    if (f16) row_buf.resize(static_cast<size_t>(batch.block_size * head_dim));
    const auto run_rows = [&](const void* base, int64_t slot, int32_t run, int64_t* stride) {
      if (!f16) {
        *stride = kv_stride;
        return static_cast<const float*>(base) + slot * kv_stride + head_offset;
      }
      const uint16_t* src = static_cast<const uint16_t*>(base) + slot * kv_stride + head_offset;
      for (int32_t r = 0; r < run; ++r) {
        k.f16_to_f32(src + r * kv_stride, row_buf.data() + r * head_dim, head_dim);
      }
      *stride = head_dim;
      return static_cast<const float*>(row_buf.data());
    };

    std::vector<float>& scores = scratch[thread];  // [num_queries, n]
    scores.resize(static_cast<size_t>(kMaxTileQueries) * max_context);
    for_each_run(table, batch.block_size, first, pos, [&](int32_t j, int32_t run, int64_t slot) {
      int64_t stride = 0;
      const float* keys = run_rows(cache.k, slot, run, &stride);
      k.qk_tile(qh, head_dim, num_queries, keys, stride, run, head_dim, scores.data() + (j - first),
                n);
    });
    float inv_sum[kMaxTileQueries];
    for (int32_t i = 0; i < num_queries; ++i) {
      float* s = scores.data() + int64_t{i} * n;
      k.scale(s, p.scale, n);
      if (p.softcap > 0) k.softcap(s, n, p.softcap);
      inv_sum[i] = 1.0f / k.exp_shift_sum(s, n, *std::max_element(s, s + n));
    }
    std::fill(oh, oh + int64_t{num_queries} * head_dim, 0.0f);
    for_each_run(table, batch.block_size, first, pos, [&](int32_t j, int32_t run, int64_t slot) {
      int64_t stride = 0;
      const float* values = run_rows(cache.v, slot, run, &stride);
      k.pv_tile(scores.data() + (j - first), n, num_queries, values, stride, run, head_dim, oh,
                head_dim);
    });
    for (int32_t i = 0; i < num_queries; ++i) k.scale(oh + int64_t{i} * head_dim, inv_sum[i], head_dim);
  };
  if (threaded) {
    pool.run(num_items, run_item);
  } else {
    for (int64_t item = 0; item < num_items; ++item) run_item(item, 0);
  }
}

}  // namespace pagoda::cpu
