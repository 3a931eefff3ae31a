// Backend::add_low_rank's default: each term as the backend's own ops run it, so that it holds
// for any memory the ops take (the rows gathered, A then B through matmul, scaled, added back
// row by row). The reference backend runs this; the CPU backend has a kernel of its own.
#include <cstdint>

#include "backend/backend.h"

namespace pagoda {

void Backend::add_low_rank(std::span<const LowRankTerm> terms, const float* x,
                           int64_t num_tokens) {
  BackendArray x_rows, ax, bax;
  for (const LowRankTerm& term : terms) {
    const auto n = static_cast<int64_t>(term.rows.size());
    if (n == 0) continue;
    const int64_t cols = term.a->cols, rows = term.b->rows;
    bool in_order = n == num_tokens;  // every row, in order: x and y as they are
    for (int64_t i = 0; in_order && i < n; ++i) in_order = term.rows[static_cast<size_t>(i)] == i;
    const float* xs = x;
    if (!in_order) {
      x_rows.reserve(*this, n * cols, "low-rank rows");
      gather_rows(x, term.rows, cols, x_rows.data());
      xs = x_rows.data();
    }
    ax.reserve(*this, n * term.a->rows, "low-rank A x");
    bax.reserve(*this, n * rows, "low-rank B A x");
    matmul(*term.a, xs, n, ax.data());
    matmul(*term.b, ax.data(), n, bax.data());
    scale(bax.data(), term.scale, n * rows);
    if (in_order) {
      add(term.y, bax.data(), n * rows);
      continue;
    }
    for (int64_t i = 0; i < n; ++i) {
      add(term.y + int64_t{term.rows[static_cast<size_t>(i)]} * rows, bax.data() + i * rows, rows);
    }
  }
}

}  // namespace pagoda
