// Low-rank products (LoRA adapters, Backend::add_low_rank) on the CPU: A and B packed once into
// float groups of 16 rows, and each term's rows taken a few tokens at a time (A, then B added
// straight into y's rows, no gathered copies), the tiles of every term of a call one job for
// the threads. The scalar kernels are here too (the portable level of the kernel table).
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/ops.h"
#include "core/error.h"
#include "quant/fp16.h"
#include "quant/reference.h"

namespace pagoda::cpu {
namespace {

constexpr int64_t kGroupRows = 16;

int64_t groups_of(int64_t rows) { return (rows + kGroupRows - 1) / kGroupRows; }

// Element e of packed column c of group g (`f16`: bits of a half, else a float).
float packed_at(const uint8_t* p, bool f16, int64_t cols, int64_t g, int64_t c, int64_t e) {
  const int64_t i = (g * cols + c) * kGroupRows + e;
  if (f16) {
    uint16_t h;
    std::memcpy(&h, p + i * 2, 2);
    return fp16_to_fp32(h);
  }
  float v;
  std::memcpy(&v, p + i * 4, 4);
  return v;
}

void down_scalar(const uint8_t* a, bool f16, int64_t rank, int64_t cols, const float* const* x,
                 int n, float scale, float* u, int64_t u_stride) {
  for (int64_t g = 0; g < groups_of(rank); ++g) {
    for (int t = 0; t < n; ++t) {
      for (int64_t e = 0; e < kGroupRows; ++e) {
        float acc[4] = {0, 0, 0, 0};  // four chains over the columns, as the vector kernels
        int64_t c = 0;
        for (; c + 4 <= cols; c += 4) {
          for (int i = 0; i < 4; ++i) acc[i] += packed_at(a, f16, cols, g, c + i, e) * x[t][c + i];
        }
        for (; c < cols; ++c) acc[0] += packed_at(a, f16, cols, g, c, e) * x[t][c];
        u[t * u_stride + g * kGroupRows + e] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) * scale;
      }
    }
  }
}

void up_scalar(const uint8_t* b, bool f16, int64_t rows, int64_t rank, const float* u,
               int64_t u_stride, int n, float* const* y) {
  for (int64_t g = 0; g < groups_of(rows); ++g) {
    const int64_t count = std::min(kGroupRows, rows - g * kGroupRows);
    for (int t = 0; t < n; ++t) {
      for (int64_t e = 0; e < count; ++e) {
        float acc = 0;
        for (int64_t j = 0; j < rank; ++j) acc += packed_at(b, f16, rank, g, j, e) * u[t * u_stride + j];
        y[t][g * kGroupRows + e] += acc;
      }
    }
  }
}

// One tile of work: up to kLowRankTokens rows of one term.
struct Item {
  const LowRankJob* job;
  size_t first;
  int count;
};

}  // namespace

void low_rank_down_scalar(const uint8_t* a, bool f16, int64_t rank, int64_t cols,
                          const float* const* x, int n, float scale, float* u, int64_t u_stride) {
  down_scalar(a, f16, rank, cols, x, n, scale, u, u_stride);
}

void low_rank_up_scalar(const uint8_t* b, bool f16, int64_t rows, int64_t rank, const float* u,
                        int64_t u_stride, int n, float* const* y) {
  up_scalar(b, f16, rows, rank, u, u_stride, n, y);
}

bool low_rank_packs_f16(const WeightMatrix& w) { return w.type == DType::kF16; }

size_t low_rank_bytes(const WeightMatrix& w) {
  return static_cast<size_t>(groups_of(w.rows) * w.cols * kGroupRows) *
         (low_rank_packs_f16(w) ? 2 : 4);
}

void pack_low_rank(const WeightMatrix& w, uint8_t* out) {
  if (!can_dequantize(w.type)) fail("LoRA: cannot read ", dtype_traits(w.type).name, " weights");
  const bool f16 = low_rank_packs_f16(w);
  std::memset(out, 0, low_rank_bytes(w));
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    const uint8_t* src = w.data + w.row_bytes * static_cast<uint64_t>(r);
    if (!f16) dequantize_row(w.type, src, row.data(), w.cols);
    const int64_t g = r / kGroupRows, e = r % kGroupRows;
    for (int64_t c = 0; c < w.cols; ++c) {
      const int64_t i = (g * w.cols + c) * kGroupRows + e;
      if (f16) {
        std::memcpy(out + i * 2, src + c * 2, 2);  // the half's bits as stored
      } else {
        std::memcpy(out + i * 4, &row[static_cast<size_t>(c)], 4);
      }
    }
  }
}

void low_rank(const Kernels& k, std::span<const LowRankJob> jobs, const float* x,
              ThreadPool& pool) {
  std::vector<Item> items;
  int64_t work = 0, u_stride = kGroupRows;
  for (const LowRankJob& job : jobs) {
    for (size_t i = 0; i < job.rows.size(); i += kLowRankTokens) {
      const auto count = static_cast<int>(std::min<size_t>(kLowRankTokens, job.rows.size() - i));
      items.push_back({&job, i, count});
    }
    work += static_cast<int64_t>(job.rows.size()) * job.rank * (job.cols + job.out_rows);
    u_stride = std::max(u_stride, groups_of(job.rank) * kGroupRows);
  }
  const bool threaded = pool.num_threads() > 1 && worth_threads(work);
  const int threads = threaded ? pool.num_threads() : 1;
  std::vector<float> u(static_cast<size_t>(threads * kLowRankTokens * u_stride));
  const auto run_item = [&](int64_t index, int thread) {
    const Item& item = items[static_cast<size_t>(index)];
    const LowRankJob& job = *item.job;
    const float* xs[kLowRankTokens];
    float* ys[kLowRankTokens];
    for (int t = 0; t < item.count; ++t) {
      const int64_t row = job.rows[item.first + static_cast<size_t>(t)];
      xs[t] = x + row * job.cols;
      ys[t] = job.y + row * job.out_rows;
    }
    float* ut = u.data() + static_cast<int64_t>(thread) * kLowRankTokens * u_stride;
    k.low_rank_down(job.a, job.a_f16, job.rank, job.cols, xs, item.count, job.scale, ut, u_stride);
    k.low_rank_up(job.b, job.b_f16, job.out_rows, job.rank, ut, u_stride, item.count, ys);
  };
  const auto num_items = static_cast<int64_t>(items.size());
  if (threaded) {
    pool.run(num_items, run_item);
  } else {
    for (int64_t i = 0; i < num_items; ++i) run_item(i, 0);
  }
}

}  // namespace pagoda::cpu
