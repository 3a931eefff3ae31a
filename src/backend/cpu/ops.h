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
