// Internal to backend/cpu: the multi-threaded drivers behind the CpuBackend ops. Each takes the
// kernel table chosen at the op's entry point and the backend's threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/thread_pool.h"
#include "core/large_buffer.h"

namespace pagoda::cpu {

// A growable buffer aligned to cache lines, reused across calls.
class Scratch {
 public:
  uint8_t* get(size_t bytes);

 private:
  LargeBuffer buffer_;
};

// y[t, r] = w[r, :] . x[t, :].   x: [num_tokens, w.cols]  y: [num_tokens, w.rows]
// `panels` holds one buffer per thread for unpacked weights.
void matmul(const Kernels& k, const WeightMatrix& w, const float* x, int64_t num_tokens, float* y,
            ThreadPool& pool, Scratch& activations, std::vector<Scratch>& panels);

// Weights packed for the types with a packed kernel (packed.h): the bytes the packed copy of w
// takes, packing it (spread over the threads), and products from packed copies.
size_t packed_bytes(const WeightMatrix& w);
void pack_matrix(const WeightMatrix& w, uint8_t* out, ThreadPool& pool);

// One product y = x . w^T from the packed copy of w.   y: [num_tokens, w->rows]
struct PackedProduct {
  const WeightMatrix* w = nullptr;
  const PackedKernel* kernel = nullptr;
  const uint8_t* packed = nullptr;
  float* y = nullptr;
};
// Products of the same activations x ([num_tokens, cols]; every w has those cols and every
// kernel the same activation format): x is quantized once and the chunks of all products are
// one job for the threads. Each product is computed as it would be alone.
void matmul_packed(const Kernels& k, std::span<const PackedProduct> products, const float* x,
                   int64_t num_tokens, ThreadPool& pool, Scratch& activations);

// Low-rank products (low_rank.cc, Backend::add_low_rank). A matrix is packed once into float
// groups of 16 rows (kernels.h's low_rank_down / low_rank_up layout): F16 weights as their
// halves, any other type as floats.
bool low_rank_packs_f16(const WeightMatrix& w);
size_t low_rank_bytes(const WeightMatrix& w);
void pack_low_rank(const WeightMatrix& w, uint8_t* out);
// One term of a call, its A (rank x cols) and B (out_rows x rank) packed.
struct LowRankJob {
  const uint8_t* a = nullptr;
  bool a_f16 = false;
  const uint8_t* b = nullptr;
  bool b_f16 = false;
  int64_t rank = 0, cols = 0, out_rows = 0;
  float scale = 1.0f;
  float* y = nullptr;              // [tokens, out_rows]
  std::span<const int32_t> rows;   // the rows of x and y it adds to
};
// y[row] += scale * B (A x[row]) for every job's rows; the tiles of all jobs one job for the
// threads (terms writing one y take disjoint rows, Backend::add_low_rank's contract).
void low_rank(const Kernels& k, std::span<const LowRankJob> jobs, const float* x,
              ThreadPool& pool);
// The portable level's kernels (kernels.h).
void low_rank_down_scalar(const uint8_t* a, bool f16, int64_t rank, int64_t cols,
                          const float* const* x, int n, float scale, float* u, int64_t u_stride);
void low_rank_up_scalar(const uint8_t* b, bool f16, int64_t rows, int64_t rank, const float* u,
                        int64_t u_stride, int n, float* const* y);

// Paged causal attention (attention.cc): runs of tokens x the query heads of one KV head per
// work item.
void attention(const Kernels& k, const float* q, KvLayer cache,
               const AttentionBatch& batch, const AttentionParams& p, float* out,
               ThreadPool& pool);

// Bidirectional attention without a cache (encoder.cc, Backend::encoder_attention): one work
// item per (sequence, head, run of query rows), float sums through the kernels' dot and axpy.
void encoder_attention(const Kernels& k, const float* q, const float* keys, const float* values,
                       const int32_t* query_start, int32_t num_seqs, const AttentionParams& p,
                       float* out, ThreadPool& pool);

// x = x * Phi(x) in float (encoder.cc, Backend::gelu_erf): erf by Abramowitz and Stegun's
// 7.1.26 (absolute error below 1.5e-7), its exp through the kernels' vector exp.
void gelu_erf(const Kernels& k, float* x, int64_t n);

// Whether spreading `work` multiply-adds over threads pays for handing them out: a smaller
// product is so short on one core that waking the workers and waiting for them would eat what
// they save (docs/BENCHMARKS.md, "CPU kernel choices, measured").
inline bool worth_threads(int64_t work) { return work >= (int64_t{1} << 19); }

}  // namespace pagoda::cpu
