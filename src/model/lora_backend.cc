// make_lora_backend (model/lora.h): a ForwardingBackend whose products add scale * B (A x) for
// the weights the adapters change, each row with its own adapter (rows grouped by adapter,
// Punica's SGMV idea in its plainest form: one pair of products per adapter present).
#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "model/lora.h"

namespace pagoda {
namespace {

// Where a changed base weight lies in the mapping, and each slot's pair for it (null where
// that slot's adapter leaves it alone, or the slot is empty).
struct Span {
  const uint8_t* begin;
  const uint8_t* end;
  uint64_t row_bytes;
  std::vector<const LoraWeight*> pairs;  // [num_adapters + 1], [0] null: no adapter
};

class LoraBackendImpl final : public LoraBackend {
 public:
  LoraBackendImpl(Backend& inner, const ModelFile& base, std::vector<const LoraAdapter*> adapters,
                  int32_t default_adapter, int32_t slots)
      : LoraBackend(inner), num_adapters_(std::max(slots, static_cast<int32_t>(adapters.size()))),
        default_(default_adapter) {
    if (!inner.host_visible()) {
      fail("--lora: the ", inner.name(), " backend does not run adapters yet (use --backend cpu)");
    }
    if (default_ < 0 || default_ > num_adapters_) {
      fail("LoRA: default adapter ", default_, " of ", num_adapters_);
    }
    for (const TensorRef& t : base.tensors()) by_name_[t.name] = &t;
    slots_.assign(static_cast<size_t>(num_adapters_) + 1, nullptr);
    std::copy(adapters.begin(), adapters.end(), slots_.begin() + 1);
    index_spans();
  }

  void set_adapter(int32_t slot, const LoraAdapter* adapter) override {
    if (slot < 1 || slot > num_adapters_) fail("LoRA: slot ", slot, " of ", num_adapters_);
    if (adapter != nullptr) {
      for (const LoraWeight& w : adapter->weights()) {
        if (by_name_.count(w.target) == 0) fail("LoRA: the base has no tensor ", w.target);
      }
    }
    std::vector<uint64_t> dropped;
    if (const LoraAdapter* old = slots_[static_cast<size_t>(slot)]) {
      for (const LoraWeight& w : old->weights()) {
        dropped.push_back(w.a.id);
        dropped.push_back(w.b.id);
        for (auto it = slices_.begin(); it != slices_.end();) {
          if (std::get<0>(it->first) != &w) {
            ++it;
            continue;
          }
          dropped.push_back(it->second.id);
          it = slices_.erase(it);
        }
      }
    }
    slots_[static_cast<size_t>(slot)] = adapter;
    index_spans();
    inner_.drop_weights(dropped);
  }

  int32_t num_adapters() const override { return num_adapters_; }

  void route(std::span<const int32_t> token_adapters,
             std::span<const int32_t> logit_rows) override {
    for (int32_t a : token_adapters) {
      if (a < 0 || a > num_adapters_) fail("LoRA: adapter ", a, " of ", num_adapters_);
    }
    tokens_.assign(token_adapters.begin(), token_adapters.end());
    logit_rows_.clear();
    for (int32_t row : logit_rows) {
      if (row < 0 || static_cast<size_t>(row) >= tokens_.size()) {
        logit_rows_.clear();
        break;
      }
      logit_rows_.push_back(tokens_[static_cast<size_t>(row)]);
    }
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
  // The adapter of each of `num_tokens` rows: the route's tokens, or its logit rows for a
  // product over those alone; null: the default adapter for every row.
  const std::vector<int32_t>* rows_for(int64_t num_tokens) const {
    if (tokens_.empty()) return nullptr;
    if (static_cast<size_t>(num_tokens) == tokens_.size()) return &tokens_;
    if (!logit_rows_.empty() && static_cast<size_t>(num_tokens) == logit_rows_.size()) {
      return &logit_rows_;
    }
    fail("LoRA: a product over ", num_tokens, " rows in a pass of ", tokens_.size(),
         " tokens and ", logit_rows_.size(), " logit rows: its adapters are unknown");
  }

  // y += scale * B[rows of w] (A x) for each row's adapter, where w is (some rows of) a weight
  // an adapter changes.
  void add_lora(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y) {
    if (num_tokens <= 0) return;
    auto it = std::upper_bound(spans_.begin(), spans_.end(), w.data,
                               [](const uint8_t* p, const Span& s) { return p < s.begin; });
    if (it == spans_.begin()) return;
    const Span& span = *std::prev(it);
    if (w.data >= span.end) return;
    if (w.row_bytes != span.row_bytes) {
      fail("LoRA: a weight an adapter changes is used in a layout the adapter cannot follow");
    }
    const int64_t first = (w.data - span.begin) / static_cast<int64_t>(span.row_bytes);
    const std::vector<int32_t>* rows = rows_for(num_tokens);
    if (rows == nullptr) {
      if (const LoraWeight* lora = span.pairs[static_cast<size_t>(default_)]) {
        add_pair(*lora, first, w, x, num_tokens, y);
      }
      return;
    }
    const int32_t one = (*rows)[0];
    if (std::all_of(rows->begin(), rows->end(), [one](int32_t a) { return a == one; })) {
      if (const LoraWeight* lora = span.pairs[static_cast<size_t>(one)]) {
        add_pair(*lora, first, w, x, num_tokens, y);
      }
      return;
    }
    for (int32_t k = 1; k <= num_adapters_; ++k) {
      const LoraWeight* lora = span.pairs[static_cast<size_t>(k)];
      if (lora == nullptr) continue;
      picked_.clear();
      for (int64_t t = 0; t < num_tokens; ++t) {
        if ((*rows)[static_cast<size_t>(t)] == k) picked_.push_back(static_cast<int32_t>(t));
      }
      if (picked_.empty()) continue;
      const auto n = static_cast<int64_t>(picked_.size());
      x_rows_.reserve(inner_, n * w.cols, "LoRA rows");
      y_rows_.reserve(inner_, n * w.rows, "LoRA rows");
      inner_.gather_rows(x, picked_, w.cols, x_rows_.data());
      std::memset(y_rows_.data(), 0, static_cast<size_t>(n * w.rows) * sizeof(float));
      add_pair(*lora, first, w, x_rows_.data(), n, y_rows_.data());
      for (int64_t i = 0; i < n; ++i) {  // host memory: the constructor checked
        inner_.add(y + int64_t{picked_[static_cast<size_t>(i)]} * w.rows,
                   y_rows_.data() + i * w.rows, w.rows);
      }
    }
  }

  void add_pair(const LoraWeight& lora, int64_t first, const WeightMatrix& w, const float* x,
                int64_t num_tokens, float* y) {
    const WeightMatrix& b = rows_of(lora, first, w.rows);
    ax_.reserve(inner_, num_tokens * lora.a.rows, "LoRA A x");
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

  // spans_ from the adapters in slots_: the base weights any of them changes, by address.
  void index_spans() {
    spans_.clear();
    std::map<const uint8_t*, size_t> by_data;
    for (size_t k = 1; k < slots_.size(); ++k) {
      if (slots_[k] == nullptr) continue;
      for (const LoraWeight& w : slots_[k]->weights()) {
        const TensorRef& t = *by_name_.at(w.target);
        auto [it, added] = by_data.try_emplace(t.data, spans_.size());
        if (added) {
          spans_.push_back({t.data, t.data + t.num_bytes, t.num_bytes / t.shape[1],
                            std::vector<const LoraWeight*>(slots_.size(), nullptr)});
        }
        spans_[it->second].pairs[k] = &w;
      }
    }
    std::sort(spans_.begin(), spans_.end(),
              [](const Span& a, const Span& b) { return a.begin < b.begin; });
  }

  int32_t num_adapters_;
  int32_t default_;
  std::map<std::string, const TensorRef*> by_name_;  // the base's tensors
  std::vector<const LoraAdapter*> slots_;            // [num_adapters_ + 1], [0] null: none
  std::vector<Span> spans_;
  std::vector<int32_t> tokens_, logit_rows_;  // the route: adapters of the pass's rows
  std::vector<int32_t> picked_;
  std::map<std::tuple<const LoraWeight*, int64_t, int64_t>, WeightMatrix> slices_;
  BackendArray ax_, bax_, x_rows_, y_rows_;
};

}  // namespace

std::unique_ptr<LoraBackend> make_lora_backend(Backend& inner, const ModelFile& base,
                                               std::vector<const LoraAdapter*> adapters,
                                               int32_t default_adapter, int32_t slots) {
  return std::make_unique<LoraBackendImpl>(inner, base, std::move(adapters), default_adapter,
                                           slots);
}

}  // namespace pagoda
