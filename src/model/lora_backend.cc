// make_lora_backend (model/lora.h): a ForwardingBackend whose products add B (A x) * scale for
// the weights an adapter changes.
#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "backend/forwarding_backend.h"
#include "core/error.h"
#include "model/lora.h"

namespace pagoda {
namespace {

// Where a changed base weight lies in the mapping, and its pair.
struct Span {
  const uint8_t* begin;
  const uint8_t* end;
  uint64_t row_bytes;
  const LoraWeight* lora;
};

class LoraBackend final : public ForwardingBackend {
 public:
  LoraBackend(Backend& inner, const ModelFile& base, const LoraAdapter& adapter)
      : ForwardingBackend(inner) {
    if (!inner.host_visible()) {
      fail("--lora: the ", inner.name(), " backend does not run adapters yet (use --backend cpu)");
    }
    std::map<std::string, const TensorRef*> by_name;
    for (const TensorRef& t : base.tensors()) by_name[t.name] = &t;
    for (const LoraWeight& w : adapter.weights()) {
      const TensorRef& t = *by_name.at(w.target);
      spans_.push_back({t.data, t.data + t.num_bytes, t.num_bytes / t.shape[1], &w});
    }
    std::sort(spans_.begin(), spans_.end(),
              [](const Span& a, const Span& b) { return a.begin < b.begin; });
  }

  void matmul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y) override {
    inner_.matmul(w, x, num_tokens, y);
    add_lora(w, x, num_tokens, y);
  }
  void matmul_many(std::initializer_list<Product> products, const float* x,
                   int64_t num_tokens) override {
    inner_.matmul_many(products, x, num_tokens);
    for (const Product& p : products) add_lora(*p.w, x, num_tokens, p.y);
  }

 private:
  // y += scale * B[rows of w] (A x) where w is (some rows of) a weight the adapter changes.
  void add_lora(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y) {
    if (num_tokens <= 0) return;
    auto it = std::upper_bound(spans_.begin(), spans_.end(), w.data,
                               [](const uint8_t* p, const Span& s) { return p < s.begin; });
    if (it == spans_.begin()) return;
    const Span& span = *std::prev(it);
    if (w.data >= span.end) return;
    if (w.row_bytes != span.row_bytes) {
      fail("--lora: '", span.lora->target, "' is used in a layout the adapter cannot follow");
    }
    const LoraWeight& lora = *span.lora;
    const int64_t first = (w.data - span.begin) / static_cast<int64_t>(span.row_bytes);
    const WeightMatrix& b = rows_of(lora, first, w.rows);
    const int64_t rank = lora.a.rows;
    ax_.reserve(inner_, num_tokens * rank, "LoRA A x");
    bax_.reserve(inner_, num_tokens * w.rows, "LoRA B A x");
    inner_.matmul(lora.a, x, num_tokens, ax_.data());
    inner_.matmul(b, ax_.data(), num_tokens, bax_.data());
    inner_.scale(bax_.data(), lora.scale, num_tokens * w.rows);
    inner_.add(y, bax_.data(), num_tokens * w.rows);
  }

  // B's rows [first, first + rows) as a matrix of its own, with an id of its own (a backend
  // keeps packed copies by id), made once.
  const WeightMatrix& rows_of(const LoraWeight& lora, int64_t first, int64_t rows) {
    if (first == 0 && rows == lora.b.rows) return lora.b;
    auto [it, added] = slices_.try_emplace({&lora, first, rows});
    if (added) {
      WeightMatrix& s = it->second;
      s = lora.b;
      s.rows = rows;
      s.data = lora.b.data + static_cast<uint64_t>(first) * lora.b.row_bytes;
      s.id = new_weight_id();
    }
    return it->second;
  }

  std::vector<Span> spans_;
  std::map<std::tuple<const LoraWeight*, int64_t, int64_t>, WeightMatrix> slices_;
  BackendArray ax_, bax_;
};

}  // namespace

std::unique_ptr<Backend> make_lora_backend(Backend& inner, const ModelFile& base,
                                           const LoraAdapter& adapter) {
  return std::make_unique<LoraBackend>(inner, base, adapter);
}

}  // namespace pagoda
