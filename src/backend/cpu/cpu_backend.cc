// The fast CPU backend: each op picks the kernel table of the active instruction-set level at
// its entry (see cpu_features.h) and spreads large work over the backend's threads
// (thread_pool.h). Matrix products and attention live in matmul.cc and attention.cc; the light
// ops are here.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/ops.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "quant/reference.h"

namespace pagoda {
class CpuThreads {
 public:
  explicit CpuThreads(int num_threads) : pool(num_threads) {}
  cpu::ThreadPool pool;
};

namespace {

using cpu::Kernels;

const Kernels& kernels() { return cpu::cpu_kernels(active_cpu_level()); }

// Elementwise work below this many values stays on the calling thread.
constexpr int64_t kThreadedElements = 1 << 16;
// Values per thread chunk of an elementwise op (a multiple of every vector width).
constexpr int64_t kElementChunk = 1 << 14;

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(std::shared_ptr<CpuThreads> threads)
      : threads_(std::move(threads)), pool_(threads_->pool) {}
  std::string name() const override { return "cpu"; }

  void embed(const WeightMatrix& table, const int32_t* ids, int64_t num_tokens, float* out) override {
    // Checked here: a throw inside a worker thread would end the process.
    if (!can_dequantize(table.type)) fail("embed: cannot read ", dtype_traits(table.type).name, " tables");
    for (int64_t t = 0; t < num_tokens; ++t) {
      if (ids[t] < 0 || ids[t] >= table.rows) fail("token id ", ids[t], " is outside the embedding table");
    }
    split(num_tokens, num_tokens * table.cols >= kThreadedElements, [&](int64_t first, int64_t last) {
      for (int64_t t = first; t < last; ++t) {
        dequantize_row(table.type, table.data + table.row_bytes * ids[t], out + t * table.cols, table.cols);
      }
    });
  }

  void prepare(const WeightMatrix& w) override {
    if (packed_kernel(kernels(), w) != nullptr) packed(w);
  }
  void drop_weights(std::span<const uint64_t> ids) override {
    for (uint64_t id : ids) {
      packed_.erase(id);
      low_rank_.erase(id);
    }
  }

  void matmul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y) override {
    matmul_many({{&w, y}}, x, num_tokens);
  }

  // Packed products that share an activation format run as one job; any other product alone.
  void matmul_many(std::initializer_list<Product> products, const float* x, int64_t num_tokens) override {
    const Kernels& k = kernels();
    std::vector<cpu::PackedProduct> packed_products;
    for (const Product& p : products) {
      const cpu::PackedKernel* pk = packed_kernel(k, *p.w);
      const bool joins = pk != nullptr &&
                         (packed_products.empty() || (packed_products[0].kernel->act == pk->act &&
                                                      p.w->cols == packed_products[0].w->cols));
      if (joins) {
        packed_products.push_back({p.w, pk, packed(*p.w), p.y});
      } else if (pk != nullptr) {
        const cpu::PackedProduct alone{p.w, pk, packed(*p.w), p.y};
        cpu::matmul_packed(k, {&alone, 1}, x, num_tokens, pool_, activations_);
      } else {
        cpu::matmul(k, *p.w, x, num_tokens, p.y, pool_, activations_, panels_);
      }
    }
    cpu::matmul_packed(k, packed_products, x, num_tokens, pool_, activations_);
  }

  // Terms whose matrices have ids run from copies packed for the low-rank kernels; any other
  // through Backend's default.
  void add_low_rank(std::span<const LowRankTerm> terms, const float* x,
                    int64_t num_tokens) override {
    std::vector<cpu::LowRankJob> jobs;
    jobs.reserve(terms.size());
    for (const LowRankTerm& term : terms) {
      if (term.rows.empty()) continue;
      if (term.a->id == 0 || term.b->id == 0) {
        Backend::add_low_rank({&term, 1}, x, num_tokens);
        continue;
      }
      jobs.push_back({low_rank_copy(*term.a), cpu::low_rank_packs_f16(*term.a),
                      low_rank_copy(*term.b), cpu::low_rank_packs_f16(*term.b), term.a->rows,
                      term.a->cols, term.b->rows, term.scale, term.y, term.rows});
    }
    cpu::low_rank(kernels(), jobs, x, pool_);
  }

  void rms_norm(const float* x, const float* weight, int64_t num_rows, int64_t dim, float eps,
                float* y) override {
    const Kernels& k = kernels();
    split(num_rows, num_rows * dim >= kThreadedElements, [&](int64_t first, int64_t last) {
      for (int64_t t = first; t < last; ++t) {
        const float ss = k.sum_squares(x + t * dim, dim);
        const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
        k.scale_mul(x + t * dim, inv, weight, y + t * dim, dim);
      }
    });
  }

  void rope(float* x, const int32_t* positions, int64_t num_tokens, int64_t num_heads,
            int64_t head_dim, const RopeParams& p) override {
    const int64_t half = p.rotary_dim / 2;
    const float* table = rope_table(positions, num_tokens, p);  // [num_tokens, half, 2]
    const int64_t stride = p.split_half ? 1 : 2;  // distance between pair starts
    const int64_t other = p.split_half ? half : 1;  // distance from a pair's first to second
    split(num_tokens, num_tokens * num_heads * head_dim >= kThreadedElements, [&](int64_t first, int64_t last) {
      for (int64_t t = first; t < last; ++t) {
        const float* cs = table + t * half * 2;
        for (int64_t h = 0; h < num_heads; ++h) {
          float* v = x + (t * num_heads + h) * head_dim;
          for (int64_t i = 0; i < half; ++i) {
            float* a = v + i * stride;
            const float x0 = a[0], x1 = a[other], c = cs[2 * i], s = cs[2 * i + 1];
            a[0] = x0 * c - x1 * s;
            a[other] = x0 * s + x1 * c;
          }
        }
      }
    });
  }

  void write_kv(const float* k, const float* v, const AttentionBatch& batch,
                const AttentionParams& p, KvLayer cache) override {
    store_kv_tokens(k, v, batch, p, cache);
  }

  void attention(const float* q, KvLayer cache, const AttentionBatch& batch,
                 const AttentionParams& p, float* out) override {
    cpu::attention(kernels(), q, cache, batch, p, out, pool_);
  }

  void silu_mul(const float* gate, const float* up, int64_t n, float* out) override {
    const Kernels& k = kernels();
    elementwise(n, [&](int64_t i, int64_t m) { k.silu_mul(gate + i, up + i, m, out + i); });
  }
  void gelu_mul(const float* gate, const float* up, int64_t n, float* out) override {
    const Kernels& k = kernels();
    elementwise(n, [&](int64_t i, int64_t m) { k.gelu_mul(gate + i, up + i, m, out + i); });
  }
  void add(float* x, const float* y, int64_t n) override {
    const Kernels& k = kernels();
    elementwise(n, [&](int64_t i, int64_t m) { k.add(x + i, y + i, m); });
  }
  void add_bias(float* x, const float* bias, int64_t num_rows, int64_t dim) override {
    const Kernels& k = kernels();
    for (int64_t t = 0; t < num_rows; ++t) k.add(x + t * dim, bias, dim);
  }
  void parallel_for(int64_t count, const std::function<void(int64_t)>& job) override {
    pool_.run(count, [&job](int64_t i, int /*thread*/) { job(i); });
  }

  void scale(float* x, float s, int64_t n) override {
    const Kernels& k = kernels();
    elementwise(n, [&](int64_t i, int64_t m) { k.scale(x + i, s, m); });
  }

  // Encoder ops (BERT): LayerNorm is the reference's arithmetic (sums in double) spread over the
  // threads, so it gives its results bit for bit; GELU and attention in float through the
  // vector kernels (encoder.cc).
  void layer_norm(const float* x, const float* weight, const float* bias, int64_t num_rows,
                  int64_t dim, float eps, float* y) override {
    split(num_rows, num_rows * dim >= kThreadedElements, [&](int64_t first, int64_t last) {
      Backend::layer_norm(x + first * dim, weight, bias, last - first, dim, eps, y + first * dim);
    });
  }
  void gelu_erf(float* x, int64_t n) override {
    const Kernels& k = kernels();
    split(n, n >= 4096, [&](int64_t first, int64_t last) { cpu::gelu_erf(k, x + first, last - first); });
  }
  void encoder_attention(const float* q, const float* k, const float* v, const int32_t* query_start,
                         int32_t num_seqs, const AttentionParams& p, float* out) override {
    cpu::encoder_attention(kernels(), q, k, v, query_start, num_seqs, p, out, pool_);
  }

 private:
  // Runs f(first, last) over [0, n), split among the threads when `threaded`.
  template <typename F>
  void split(int64_t n, bool threaded, F f) {
    if (!threaded || n < 2) {
      f(0, n);
      return;
    }
    const int64_t num_chunks = std::min<int64_t>(n, 4 * pool_.num_threads());
    pool_.run(num_chunks, [&](int64_t c, int) { f(n * c / num_chunks, n * (c + 1) / num_chunks); });
  }

  // Runs f(first, count) over [0, n) in chunks, threaded when n is large.
  template <typename F>
  void elementwise(int64_t n, F f) {
    if (n < kThreadedElements) {
      f(0, n);
      return;
    }
    const int64_t num_chunks = (n + kElementChunk - 1) / kElementChunk;
    pool_.run(num_chunks, [&](int64_t c, int) { f(c * kElementChunk, std::min(kElementChunk, n - c * kElementChunk)); });
  }

  // The packed kernel for w at this level, if w is to be packed (it has an id).
  static const cpu::PackedKernel* packed_kernel(const Kernels& k, const WeightMatrix& w) {
    const int type = cpu::dtype_index(w.type);
    if (w.id == 0 || type < 0 || type >= static_cast<int>(std::size(k.packed))) return nullptr;
    return k.packed[type].tile != nullptr ? &k.packed[type] : nullptr;
  }

  // The packed copy of w, made by prepare() or on its first product. The file's pages of a mapped matrix are
  // then dropped from memory, so the weights stay resident once, not twice (what else reads
  // them, such as an embedding lookup in a tied output matrix, reads them back from the file).
  const uint8_t* packed(const WeightMatrix& w) {
    std::unique_ptr<cpu::Scratch>& copy = packed_[w.id];
    if (copy == nullptr) {
      copy = std::make_unique<cpu::Scratch>();
      cpu::pack_matrix(w, copy->get(cpu::packed_bytes(w)), pool_);
      if (w.mapped) release_mapped_pages(w.data, static_cast<size_t>(w.row_bytes * w.rows));
    }
    return copy->get(0);
  }

  // w packed for the low-rank kernels, made on its first product (an adapter's matrices are
  // small: the file's pages stay).
  const uint8_t* low_rank_copy(const WeightMatrix& w) {
    std::unique_ptr<cpu::Scratch>& copy = low_rank_[w.id];
    if (copy == nullptr) {
      auto made = std::make_unique<cpu::Scratch>();
      cpu::pack_low_rank(w, made->get(cpu::low_rank_bytes(w)));
      copy = std::move(made);
    }
    return copy->get(0);
  }

  // cos and sin of every (token, pair) angle. The angle is formed and reduced to [-pi, pi] in
  // double so large positions keep their precision; the float sin / cos of the reduced angle is
  // then within about 3e-7. Consecutive calls with the same positions (q, then k) share it.
  const float* rope_table(const int32_t* positions, int64_t num_tokens, const RopeParams& p) {
    const int64_t half = p.rotary_dim / 2;
    const bool same = rope_positions_.size() == static_cast<size_t>(num_tokens) &&
                      std::equal(rope_positions_.begin(), rope_positions_.end(), positions) &&
                      rope_key_.rotary_dim == p.rotary_dim && rope_key_.theta == p.theta &&
                      rope_key_.position_scale == p.position_scale &&
                      rope_key_.freq_factors == p.freq_factors && rope_key_.yarn == p.yarn &&
                      rope_key_.yarn_low == p.yarn_low && rope_key_.yarn_high == p.yarn_high &&
                      rope_key_.mscale == p.mscale;
    if (same) return rope_cs_.data();
    rope_key_ = p;
    rope_positions_.assign(positions, positions + num_tokens);
    std::vector<double> freq(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
      freq[i] = std::pow(static_cast<double>(p.theta), -2.0 * static_cast<double>(i) / p.rotary_dim);
      if (p.freq_factors != nullptr) freq[i] /= p.freq_factors[i];
      freq[i] *= p.angle_scale(i);
    }
    rope_cs_.resize(static_cast<size_t>(num_tokens * half * 2));
    constexpr double kTwoPi = 6.283185307179586;
    for (int64_t t = 0; t < num_tokens; ++t) {
      const double pos = static_cast<double>(positions[t]);
      for (int64_t i = 0; i < half; ++i) {
        const double angle = pos * freq[i];
        const auto reduced = static_cast<float>(angle - kTwoPi * std::nearbyint(angle / kTwoPi));
        rope_cs_[(t * half + i) * 2] = std::cos(reduced) * p.mscale;
        rope_cs_[(t * half + i) * 2 + 1] = std::sin(reduced) * p.mscale;
      }
    }
    return rope_cs_.data();
  }

  std::shared_ptr<CpuThreads> threads_;
  cpu::ThreadPool& pool_;  // threads_'s
  cpu::Scratch activations_;         // quantized activation rows of the current matmul
  std::vector<cpu::Scratch> panels_;  // per thread: weight rows unpacked for prefill
  std::unordered_map<uint64_t, std::unique_ptr<cpu::Scratch>> packed_;  // by WeightMatrix::id
  std::unordered_map<uint64_t, std::unique_ptr<cpu::Scratch>> low_rank_;  // by WeightMatrix::id
  RopeParams rope_key_;
  std::vector<int32_t> rope_positions_;
  std::vector<float> rope_cs_;  // [num_tokens, rotary_dim / 2, 2]
};

}  // namespace

std::shared_ptr<CpuThreads> make_cpu_threads(int num_threads) {
  return std::make_shared<CpuThreads>(num_threads > 0 ? num_threads : omp_get_num_procs());
}

std::unique_ptr<Backend> make_cpu_backend(std::shared_ptr<CpuThreads> threads) {
  return std::make_unique<CpuBackend>(std::move(threads));
}

std::unique_ptr<Backend> make_cpu_backend(int num_threads) {
  return make_cpu_backend(make_cpu_threads(num_threads));
}

}  // namespace pagoda
