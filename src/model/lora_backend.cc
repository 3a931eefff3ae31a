// make_lora_backend (model/lora.h): a ForwardingBackend whose products add scale * B (A x) for
// the weights the adapters change, each row with its own adapter: the rows are grouped by
// adapter once per pass (Punica's SGMV idea), and every adapter's term of a product, or of the
// products of one input (Q, K and V), goes to the inner backend as one add_low_rank call.
#include <algorithm>
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
    group(tokens_, token_groups_);
    group(logit_rows_, logit_groups_);
  }

  void matmul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y) override {
    inner_.matmul(w, x, num_tokens, y);
    if (num_tokens <= 0) return;
    terms_.clear();
    add_terms(w, y, groups_for(num_tokens));
    if (!terms_.empty()) inner_.add_low_rank(terms_, x, num_tokens);
  }
  // The adapters' terms of all the products (Q, K and V; gate and up) go in one call.
  void matmul_many(std::initializer_list<Product> products, const float* x,
                   int64_t num_tokens) override {
    inner_.matmul_many(products, x, num_tokens);
    if (num_tokens <= 0) return;
    terms_.clear();
    const Groups& groups = groups_for(num_tokens);
    for (const Product& p : products) add_terms(*p.w, p.y, groups);
    if (!terms_.empty()) inner_.add_low_rank(terms_, x, num_tokens);
  }

 private:
  // The rows of a product taken by each slot's adapter: [num_adapters_ + 1], [0] none's.
  using Groups = std::vector<std::vector<int32_t>>;

  // `groups` from the adapter of each row.
  void group(const std::vector<int32_t>& adapters, Groups& groups) const {
    groups.resize(static_cast<size_t>(num_adapters_) + 1);
    for (std::vector<int32_t>& rows : groups) rows.clear();
    for (size_t t = 0; t < adapters.size(); ++t) {
      groups[static_cast<size_t>(adapters[t])].push_back(static_cast<int32_t>(t));
    }
  }

  // The groups of a product over `num_tokens` rows: the route's tokens, or its logit rows for a
  // product over those alone; without a route, the default adapter's for every row.
  const Groups& groups_for(int64_t num_tokens) {
    if (tokens_.empty()) {
      default_groups_.resize(static_cast<size_t>(num_adapters_) + 1);
      std::vector<int32_t>& rows = default_groups_[static_cast<size_t>(default_)];
      if (static_cast<int64_t>(rows.size()) != num_tokens) {
        rows.resize(static_cast<size_t>(num_tokens));
        for (size_t t = 0; t < rows.size(); ++t) rows[t] = static_cast<int32_t>(t);
      }
      return default_groups_;
    }
    if (static_cast<size_t>(num_tokens) == tokens_.size()) return token_groups_;
    if (!logit_rows_.empty() && static_cast<size_t>(num_tokens) == logit_rows_.size()) {
      return logit_groups_;
    }
    fail("LoRA: a product over ", num_tokens, " rows in a pass of ", tokens_.size(),
         " tokens and ", logit_rows_.size(), " logit rows: its adapters are unknown");
  }

  // Appends to terms_ each adapter's pair for y = w x, over that adapter's rows, where w is
  // (some rows of) a weight an adapter changes.
  void add_terms(const WeightMatrix& w, float* y, const Groups& groups) {
    auto it = std::upper_bound(spans_.begin(), spans_.end(), w.data,
                               [](const uint8_t* p, const Span& s) { return p < s.begin; });
    if (it == spans_.begin()) return;
    const Span& span = *std::prev(it);
    if (w.data >= span.end) return;
    if (w.row_bytes != span.row_bytes) {
      fail("LoRA: a weight an adapter changes is used in a layout the adapter cannot follow");
    }
    const int64_t first = (w.data - span.begin) / static_cast<int64_t>(span.row_bytes);
    for (size_t k = 1; k < groups.size(); ++k) {
      const LoraWeight* lora = span.pairs[k];
      if (lora == nullptr || groups[k].empty()) continue;
      terms_.push_back({&lora->a, &rows_of(*lora, first, w.rows), lora->scale, y, groups[k]});
    }
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
  Groups token_groups_, logit_groups_, default_groups_;
  std::vector<LowRankTerm> terms_;
  std::map<std::tuple<const LoraWeight*, int64_t, int64_t>, WeightMatrix> slices_;
};

}  // namespace

std::unique_ptr<LoraBackend> make_lora_backend(Backend& inner, const ModelFile& base,
                                               std::vector<const LoraAdapter*> adapters,
                                               int32_t default_adapter, int32_t slots) {
  return std::make_unique<LoraBackendImpl>(inner, base, std::move(adapters), default_adapter,
                                           slots);
}

}  // namespace pagoda
