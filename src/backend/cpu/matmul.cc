// Matrix products straight from the stored weight blocks. The activation rows are quantized
// once per call (to the 8-bit layout the weight type's dot product wants), then threads take
// chunks of output rows. Within a chunk, tiles of R rows x T tokens run over the tokens in
// groups sized to stay in L2, so each weight block is loaded once per T tokens (registers) and
// each chunk of rows once per token group (cache) rather than once per token.
#include <algorithm>
#include <cstdlib>
#include <span>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cpu/packed.h"
#include "core/dtype.h"
#include "core/error.h"
#include "quant/reference.h"

namespace pagoda::cpu {
namespace {

// Activation bytes per token group: half of a 1 MiB L2, leaving room for the weight chunk.
constexpr int64_t kTokenGroupBytes = 512 * 1024;
// Rows per work item when tiling many tokens: a chunk of weights that stays in L2 while the
// token groups pass over it.
constexpr int64_t kPrefillChunkRows = 64;
// Bytes of packed weights per chunk when many tokens pass over it: held in L2.
constexpr int64_t kPackedChunkBytes = 768 * 1024;
// Bytes of unpacked weights per chunk (per thread), to stay in L2 beside the token group.
constexpr int64_t kPanelBytes = 384 * 1024;
// Work items per thread for a matrix-vector product; more balance the load when another
// process holds a core, fewer keep the hardware prefetcher on long runs.
constexpr int64_t kItemsPerThread = 8;

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Types no level has a kernel for: one row at a time in float (never the whole matrix).
void matmul_dequantized(const Kernels& k, const WeightMatrix& w, const float* x,
                        int64_t num_tokens, float* y, ThreadPool& pool) {
  if (!can_dequantize(w.type)) fail("matmul: no kernel for ", dtype_traits(w.type).name, " weights");
  const bool threaded = worth_threads(w.rows * w.cols * num_tokens);
  const int64_t num_chunks = threaded ? pool.num_threads() : 1;
  const int64_t chunk_rows = (w.rows + num_chunks - 1) / num_chunks;
  pool.run(num_chunks, [&](int64_t chunk, int) {
    std::vector<float> row(static_cast<size_t>(w.cols));
    for (int64_t r = chunk * chunk_rows; r < std::min(w.rows, (chunk + 1) * chunk_rows); ++r) {
      dequantize_row(w.type, w.data + w.row_bytes * r, row.data(), w.cols);
      for (int64_t t = 0; t < num_tokens; ++t) y[t * w.rows + r] = k.dot(row.data(), x + t * w.cols, w.cols);
    }
  });
}

// The activation rows in `format` (the float rows themselves for kF32); sets *x_stride.
const uint8_t* quantize_activations(const Kernels& k, ActFormat format, const float* x,
                                    int64_t num_tokens, int64_t cols, bool threaded,
                                    ThreadPool& pool, Scratch& activations, int64_t* x_stride) {
  if (format == ActFormat::kF32) {
    *x_stride = cols * static_cast<int64_t>(sizeof(float));
    return reinterpret_cast<const uint8_t*>(x);
  }
  const int64_t stride = act_row_bytes(format, cols);
  *x_stride = stride;
  uint8_t* buffer = activations.get(static_cast<size_t>(num_tokens * stride));
  const QuantizeFn quantize = format == ActFormat::kQ8 ? k.quantize_q8 : k.quantize_q8k;
  const int64_t num_chunks = threaded ? std::min<int64_t>(num_tokens, pool.num_threads()) : 1;
  pool.run(num_chunks, [&](int64_t chunk, int) {
    for (int64_t t = chunk; t < num_tokens; t += num_chunks) quantize(x + t * cols, cols, buffer + t * stride);
  });
  return buffer;
}

}  // namespace

uint8_t* Scratch::get(size_t bytes) {
  if (bytes > buffer_.size()) buffer_ = LargeBuffer(bytes, "CPU backend scratch");
  return buffer_.data();
}

void matmul(const Kernels& k, const WeightMatrix& w, const float* x, int64_t num_tokens, float* y,
            ThreadPool& pool, Scratch& activations, std::vector<Scratch>& panels) {
  if (num_tokens <= 0 || w.rows <= 0) return;
  const int type = dtype_index(w.type);
  const MatmulKernel kernel =
      type >= 0 && type < static_cast<int>(std::size(k.matmul)) ? k.matmul[type] : MatmulKernel{};
  if (kernel.tile == nullptr) {
    matmul_dequantized(k, w, x, num_tokens, y, pool);
    return;
  }
  const int64_t rows = w.rows, cols = w.cols;
  const bool threaded = pool.num_threads() > 1 && worth_threads(rows * cols * num_tokens);

  int64_t x_stride = 0;
  const uint8_t* xa = quantize_activations(k, kernel.act, x, num_tokens, cols, threaded, pool, activations, &x_stride);

  const int64_t tile_rows = kernel.tile_rows, tile_tokens = kernel.tile_tokens;
  const int64_t threads = threaded ? pool.num_threads() : 1;
  const bool prefill = num_tokens > tile_tokens;
  const bool unpack = prefill && kernel.unpack != nullptr;
  const int64_t panel_stride = cols / 32 * kernel.panel_bytes_per_block;
  int64_t chunk_rows, group_tokens;
  if (!prefill) {
    chunk_rows = round_up(std::max<int64_t>(1, rows / (threads * kItemsPerThread)), tile_rows);
    group_tokens = num_tokens;
  } else {
    int64_t max_rows = kPrefillChunkRows;
    if (unpack) max_rows = std::clamp<int64_t>(kPanelBytes / panel_stride, tile_rows, max_rows);
    chunk_rows = round_up(std::min(max_rows, (rows + threads - 1) / threads), tile_rows);
    group_tokens = round_up(std::clamp<int64_t>(kTokenGroupBytes / x_stride, 1, num_tokens), tile_tokens);
  }
  const int64_t num_chunks = (rows + chunk_rows - 1) / chunk_rows;
  if (unpack && panels.size() < static_cast<size_t>(threads)) panels.resize(static_cast<size_t>(threads));

  const auto run_chunk = [&](int64_t chunk, int thread) {
    const int64_t r_begin = chunk * chunk_rows;
    const int64_t r_end = std::min(rows, r_begin + chunk_rows);
    // The tiles read either the stored rows or this chunk unpacked into the thread's panel.
    TileFn tile = kernel.tile;
    const uint8_t* base = w.data + r_begin * w.row_bytes;
    uint64_t stride = w.row_bytes;
    if (unpack) {
      uint8_t* panel = panels[thread].get(static_cast<size_t>((r_end - r_begin) * panel_stride));
      kernel.unpack(base, w.row_bytes, r_end - r_begin, cols, panel);
      tile = kernel.panel_tile;
      base = panel;
      stride = static_cast<uint64_t>(panel_stride);
    }
    for (int64_t g = 0; g < num_tokens; g += group_tokens) {
      const int64_t g_end = std::min(num_tokens, g + group_tokens);
      for (int64_t r = r_begin; r < r_end; r += tile_rows) {
        const int num_rows = static_cast<int>(std::min(tile_rows, r_end - r));
        for (int64_t t = g; t < g_end; t += tile_tokens) {
          const int n = static_cast<int>(std::min(tile_tokens, g_end - t));
          tile(base + (r - r_begin) * stride, stride, num_rows, xa + t * x_stride, x_stride, n, cols,
               y + t * rows + r, rows);
        }
      }
    }
  };
  if (threaded) {
    pool.run(num_chunks, run_chunk);
  } else {
    for (int64_t chunk = 0; chunk < num_chunks; ++chunk) run_chunk(chunk, 0);
  }
}

namespace {
int64_t packed_groups(int64_t rows) { return (rows + kPackRows - 1) / kPackRows; }
}  // namespace

size_t packed_bytes(const WeightMatrix& w) {
  return static_cast<size_t>(packed_groups(w.rows)) * packed_group_bytes(w.type, w.cols);
}

void pack_matrix(const WeightMatrix& w, uint8_t* out, ThreadPool& pool) {
  const int64_t groups = packed_groups(w.rows);
  const int64_t num_chunks = std::min<int64_t>(groups, 8 * pool.num_threads());
  pool.run(num_chunks, [&](int64_t c, int) {
    pack_groups(w.type, w.data, w.row_bytes, w.rows, w.cols, groups * c / num_chunks,
                groups * (c + 1) / num_chunks, out);
  });
}

void matmul_packed(const Kernels& k, std::span<const PackedProduct> products, const float* x,
                   int64_t num_tokens, ThreadPool& pool, Scratch& activations) {
  if (num_tokens <= 0 || products.empty()) return;
  const int64_t cols = products[0].w->cols;
  const ActFormat act = products[0].kernel->act;
  int64_t work = 0;
  for (const PackedProduct& p : products) {
    PAGODA_CHECK(p.w->cols == cols && p.kernel->act == act);
    work += p.w->rows * cols * num_tokens;
  }
  const bool threaded = pool.num_threads() > 1 && worth_threads(work);
  int64_t x_stride = 0;
  const uint8_t* xa = quantize_activations(k, act, x, num_tokens, cols, threaded, pool, activations, &x_stride);
  const int64_t threads = threaded ? pool.num_threads() : 1;

  // Chunks of row groups: several per thread to balance the load, and for many tokens small
  // enough to stay in L2 while every tile of tokens passes over them; within a chunk the token
  // tiles go outside, so a tile's activations stay in L1 and its outputs are written in runs.
  // The chunks of all products form one job, numbered product after product.
  struct Plan {
    int64_t groups = 0, num_chunks = 0, first_chunk = 0, tile_groups = 1;
    size_t group_bytes = 0;
    // Chunk c's groups: the product's groups split evenly, at multiples of tile_groups.
    int64_t boundary(int64_t c) const {
      return c >= num_chunks ? groups : c * groups / num_chunks / tile_groups * tile_groups;
    }
  };
  std::vector<Plan> plans(products.size());
  int64_t num_chunks = 0;
  for (size_t i = 0; i < products.size(); ++i) {
    const PackedProduct& p = products[i];
    Plan& plan = plans[i];
    plan.groups = packed_groups(p.w->rows);
    plan.group_bytes = packed_group_bytes(p.w->type, cols);
    plan.tile_groups = p.kernel->tile_groups;
    int64_t chunks = 0;
    if (num_tokens > kPackTokens) {
      // As few chunks as fit in L2, a multiple of the thread count, the groups split evenly
      // (boundary()): chunks of a fixed size would end in a short remainder, and the thread
      // that drew it would sit idle while the others finish their full chunks.
      const int64_t fit = std::max<int64_t>(1, kPackedChunkBytes / static_cast<int64_t>(plan.group_bytes));
      chunks = round_up((plan.groups + fit - 1) / fit, threads);
    } else {
      const int64_t chunk_groups = round_up(
          std::max<int64_t>(1, plan.groups / (threads * kItemsPerThread)), plan.tile_groups);
      chunks = (plan.groups + chunk_groups - 1) / chunk_groups;
    }
    plan.num_chunks =
        std::clamp<int64_t>(chunks, 1, std::max<int64_t>(1, plan.groups / plan.tile_groups));
    plan.first_chunk = num_chunks;
    num_chunks += plan.num_chunks;
  }
  const auto run_chunk = [&](int64_t chunk, int) {
    size_t i = 0;
    while (i + 1 < plans.size() && plans[i + 1].first_chunk <= chunk) ++i;
    const PackedProduct& p = products[i];
    const Plan& plan = plans[i];
    const int64_t rows = p.w->rows;
    const int64_t g_begin = plan.boundary(chunk - plan.first_chunk);
    const int64_t g_end = plan.boundary(chunk - plan.first_chunk + 1);
    for (int64_t t = 0; t < num_tokens; t += kPackTokens) {
      const int n = static_cast<int>(std::min<int64_t>(kPackTokens, num_tokens - t));
      for (int64_t g = g_begin; g < g_end; g += p.kernel->tile_groups) {
        const uint8_t* group = p.packed + static_cast<size_t>(g) * plan.group_bytes;
        const int64_t tile_rows = std::min<int64_t>(g_end - g, p.kernel->tile_groups) * kPackRows;
        const int num_rows = static_cast<int>(std::min(tile_rows, rows - g * kPackRows));
        p.kernel->tile(group, cols, xa + t * x_stride, static_cast<size_t>(x_stride), n,
                       p.y + t * rows + g * kPackRows, rows, num_rows);
      }
    }
  };
  if (threaded) {
    pool.run(num_chunks, run_chunk);
  } else {
    for (int64_t chunk = 0; chunk < num_chunks; ++chunk) run_chunk(chunk, 0);
  }
}

}  // namespace pagoda::cpu
