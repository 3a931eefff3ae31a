// Paged causal attention. A work item is a run of up to a few tokens of one sequence and the
// query heads of one KV head (grouped-query attention), so each cached key and value is read
// once for all of those rows:
//   1. scores of every row against each KV block in the item's range (qk_block: the block's
//      keys are stored transposed, so 16 keys fill the lanes of one vector);
//   2. each row's softmax over its own causal (or sliding-window) range, and the head's sink
//      logit where the model has them (gpt-oss);
//   3. each token's output rows as the weighted sum of its range's values (pv_rows).
// The order of every sum is fixed by the head dimension and the row's own range, so a token's
// result does not depend on how many tokens or heads share its item: batching never changes it.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/ops.h"
#include "core/error.h"

namespace pagoda::cpu {
namespace {

// Query rows an item aims for: enough to reuse each block of keys many times while its scores
// ([rows, range] floats) stay small.
constexpr int32_t kRowsPerItem = 32;
constexpr int64_t kMaxScoreFloats = int64_t{1} << 18;
// Whole-sequence decode items only when each thread gets at least this many.
constexpr int64_t kDecodeItemsPerThread = 4;

struct Item {
  int32_t seq = 0;
  int32_t first_token = 0;  // tokens [first_token, first_token + num_tokens) of the batch
  int32_t num_tokens = 0;
  int32_t kv_head = 0;      // KV heads [kv_head, kv_head + num_kv_heads)
  int32_t num_kv_heads = 1;
  int32_t first_head = 0;   // with one KV head: its query heads [first_head, first_head + num_heads);
  int32_t num_heads = 0;    // with several, all of theirs (num_heads = num_kv_heads * group)
};

// Each thread's buffers, kept across calls.
struct ItemScratch {
  std::vector<float> scores;             // [rows, width], rows KV head by KV head
  std::vector<const float*> q_rows;      // [rows]
  std::vector<const void*> value_rows;   // [kv heads of the item, width]: value of position base + j
};

// First position token t attends to.
int32_t first_position(int32_t pos, const AttentionParams& p) {
  return p.window > 0 ? std::max(0, pos - p.window + 1) : 0;
}

class AttentionRun {
 public:
  AttentionRun(const Kernels& k, const float* q, KvLayer cache, const AttentionBatch& batch,
               const AttentionParams& p, float* out)
      : k_(k), q_(q), cache_(cache), batch_(batch), p_(p), out_(out),
        head_bytes_(kv_head_bytes(cache.type, p.head_dim)),
        block_bytes_(int64_t{p.num_kv_heads} * head_bytes_ * batch.block_size) {}

  // Rows are ordered (KV head, token, query head of that KV head): each KV head's rows are
  // contiguous for qk_block, and each (KV head, token) pair's for pv_rows.
  void run(const Item& item, ItemScratch& s) const {
    const int32_t bs = batch_.block_size;
    const int32_t* table = batch_.block_table + int64_t{item.seq} * batch_.max_blocks_per_seq;
    const int32_t t0 = item.first_token, t1 = item.first_token + item.num_tokens;
    int32_t lo = batch_.positions[t0], hi = lo;
    for (int32_t t = t0; t < t1; ++t) {
      lo = std::min(lo, first_position(batch_.positions[t], p_));
      hi = std::max(hi, batch_.positions[t]);
    }
    const int32_t first_block = lo / bs, last_block = hi / bs;
    const int32_t base = first_block * bs;
    const int64_t width = int64_t{last_block - first_block + 1} * bs;
    const int32_t heads_per_kv = item.num_heads / item.num_kv_heads;
    const int32_t rows_per_kv = item.num_tokens * heads_per_kv;
    const int32_t num_rows = item.num_tokens * item.num_heads;
    const int64_t dim = p_.head_dim;

    s.scores.resize(static_cast<size_t>(num_rows * width));
    s.q_rows.resize(static_cast<size_t>(num_rows));
    for (int32_t kv = 0; kv < item.num_kv_heads; ++kv) {
      for (int32_t t = t0; t < t1; ++t) {
        for (int32_t h = 0; h < heads_per_kv; ++h) {
          const int32_t head = item.first_head + kv * heads_per_kv + h;
          s.q_rows[kv * rows_per_kv + (t - t0) * heads_per_kv + h] =
              q_ + (int64_t{t} * p_.num_heads + head) * dim;
        }
      }
    }
    s.value_rows.resize(static_cast<size_t>(item.num_kv_heads * width));
    const auto* k_base = static_cast<const uint8_t*>(cache_.k);
    const auto* v_base = static_cast<const uint8_t*>(cache_.v);
    // One head's keys (or values) of a block are a contiguous slab, and the item's heads' slabs
    // one contiguous run at this offset into the block.
    const int64_t slab_bytes = bs * head_bytes_;
    const int64_t run_offset = int64_t{item.kv_head} * slab_bytes;
    const int64_t run_bytes = item.num_kv_heads * slab_bytes;
    for (int32_t b = first_block; b <= last_block; ++b) {
      const int64_t block = table[b];
      if (b < last_block) {
        // The next block's keys for the next call, its values for the weighted sums below: they
        // sit anywhere in the pool, so no hardware prefetcher sees them coming.
        const int64_t next = table[b + 1] * block_bytes_ + run_offset;
        for (int64_t offset = 0; offset < run_bytes; offset += 64) {
          __builtin_prefetch(k_base + next + offset);
          __builtin_prefetch(v_base + next + offset);
        }
      }
      const int64_t at = block * block_bytes_ + run_offset;
      for (int32_t kv = 0; kv < item.num_kv_heads; ++kv) {
        k_.qk_block(s.q_rows.data() + kv * rows_per_kv, rows_per_kv, k_base + at + kv * slab_bytes, cache_.type,
                    dim, bs, s.scores.data() + kv * rows_per_kv * width + (b - first_block) * bs, width);
        const uint8_t* values = v_base + at + kv * slab_bytes;
        const void** row = s.value_rows.data() + kv * width + (b - first_block) * bs;
        for (int32_t o = 0; o < bs; ++o) row[o] = values + o * head_bytes_;
      }
    }

    for (int32_t kv = 0; kv < item.num_kv_heads; ++kv) {
      for (int32_t t = t0; t < t1; ++t) {
        const int32_t pos = batch_.positions[t];
        const int32_t first = first_position(pos, p_);
        const int32_t n = pos - first + 1;
        const int32_t row0 = kv * rows_per_kv + (t - t0) * heads_per_kv;
        float* p = s.scores.data() + row0 * width + (first - base);
        float inv_sum[kMaxGroup];
        for (int32_t h = 0; h < heads_per_kv; ++h) {
          float* row = p + h * width;
          const float top = k_.scale_max(row, p_.scale, n);
          if (p_.sinks == nullptr) {
            inv_sum[h] = 1.0f / k_.exp_shift_sum(row, n, top);
            continue;
          }
          // The sink joins the softmax as one more logit whose value row is zero.
          const float sink = p_.sinks[item.first_head + kv * heads_per_kv + h];
          const float shift = std::max(top, sink);
          inv_sum[h] = 1.0f / (k_.exp_shift_sum(row, n, shift) + std::exp(sink - shift));
        }
        float* o = out_ + (int64_t{t} * p_.num_heads + item.first_head + kv * heads_per_kv) * dim;
        k_.pv_rows(p, width, heads_per_kv, s.value_rows.data() + kv * width + (first - base), cache_.type, n, dim,
                   o, dim);
        for (int32_t h = 0; h < heads_per_kv; ++h) k_.scale(o + h * dim, inv_sum[h], dim);
      }
    }
  }

  static constexpr int32_t kMaxGroup = 256;

 private:
  const Kernels& k_;
  const float* q_;
  KvLayer cache_;
  const AttentionBatch& batch_;
  const AttentionParams& p_;
  float* out_;
  int64_t head_bytes_;   // one head's K (or V) of one token
  int64_t block_bytes_;  // one block of K (or V), all heads
};

// Splits the batch into items: each sequence's tokens in runs, times KV heads, times parts of
// each group of query heads when there would be too few items for the threads. A sequence that
// decodes one token takes all KV heads in one item when there are enough such items to share
// out (and its scores for all heads stay small): then each block's keys and values for all heads
// are one contiguous run.
std::vector<Item> make_items(const AttentionBatch& batch, const AttentionParams& p, int num_threads) {
  const int32_t group = p.num_heads / p.num_kv_heads;
  std::vector<Item> items;
  int64_t num_runs = 0, num_decoding = 0;
  std::vector<int32_t> run_tokens(static_cast<size_t>(batch.num_seqs));
  for (int32_t s = 0; s < batch.num_seqs; ++s) {
    const int32_t num_tokens = batch.query_start[s + 1] - batch.query_start[s];
    if (num_tokens <= 0) continue;
    num_decoding += num_tokens == 1;
    const int32_t last = batch.positions[batch.query_start[s + 1] - 1];
    const int64_t width = last + 1 + batch.block_size;
    const int64_t by_scores = std::max<int64_t>(1, kMaxScoreFloats / (width * group));
    run_tokens[s] = static_cast<int32_t>(
        std::min<int64_t>({num_tokens, std::max(1, kRowsPerItem / group), by_scores}));
    num_runs += (num_tokens + run_tokens[s] - 1) / run_tokens[s];
  }
  const bool whole_decodes = num_decoding >= kDecodeItemsPerThread * num_threads;
  const int64_t num_pairs = num_runs * p.num_kv_heads;
  int32_t heads_per_item = group;
  if (num_pairs < num_threads) {
    const int64_t parts = std::min<int64_t>(group, (num_threads + num_pairs - 1) / num_pairs);
    heads_per_item = static_cast<int32_t>((group + parts - 1) / parts);
  }
  for (int32_t s = 0; s < batch.num_seqs; ++s) {
    const int32_t num_tokens = batch.query_start[s + 1] - batch.query_start[s];
    if (whole_decodes && num_tokens == 1 &&
        int64_t{batch.positions[batch.query_start[s]] + 1 + batch.block_size} * p.num_heads <=
            kMaxScoreFloats) {
      items.push_back({s, batch.query_start[s], 1, 0, p.num_kv_heads, 0, p.num_heads});
      continue;
    }
    for (int32_t t = batch.query_start[s]; t < batch.query_start[s + 1]; t += run_tokens[s]) {
      const int32_t run = std::min(run_tokens[s], batch.query_start[s + 1] - t);
      for (int32_t kvh = 0; kvh < p.num_kv_heads; ++kvh) {
        for (int32_t h = 0; h < group; h += heads_per_item) {
          items.push_back({s, t, run, kvh, 1, kvh * group + h, std::min(heads_per_item, group - h)});
        }
      }
    }
  }
  return items;
}

}  // namespace

void attention(const Kernels& k, const float* q, KvLayer cache, const AttentionBatch& batch,
               const AttentionParams& p, float* out, ThreadPool& pool) {
  if (batch.num_tokens <= 0) return;
  if (p.num_kv_heads <= 0 || p.num_heads % p.num_kv_heads != 0) {
    fail("attention: ", p.num_heads, " heads do not divide into ", p.num_kv_heads, " KV heads");
  }
  if (p.num_heads / p.num_kv_heads > AttentionRun::kMaxGroup) {
    fail("attention: more than ", AttentionRun::kMaxGroup, " query heads per KV head");
  }
  int64_t work = 0;
  for (int32_t t = 0; t < batch.num_tokens; ++t) {
    work += int64_t{batch.positions[t] + 1} * p.head_dim * p.num_heads * 2;
  }
  const bool threaded = pool.num_threads() > 1 && worth_threads(work);
  const std::vector<Item> items = make_items(batch, p, threaded ? pool.num_threads() : 1);
  const AttentionRun attend(k, q, cache, batch, p, out);
  const auto run_item = [&](int64_t i, int) {
    thread_local ItemScratch scratch;
    attend.run(items[static_cast<size_t>(i)], scratch);
  };
  if (threaded) {
    pool.run(static_cast<int64_t>(items.size()), run_item);
  } else {
    for (size_t i = 0; i < items.size(); ++i) run_item(static_cast<int64_t>(i), 0);
  }
}

}  // namespace pagoda::cpu
