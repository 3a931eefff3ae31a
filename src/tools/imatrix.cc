#include "tools/imatrix.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "backend/forwarding_backend.h"
#include "core/error.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/kv_storage.h"
#include "model/architecture.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

void Imatrix::add(const std::string& name, int64_t expert, int64_t num_experts, const float* x,
                  int64_t num_rows, int64_t cols) {
  ImatrixEntry& e = entries[name];
  if (e.counts.empty()) {
    e.cols = cols;
    e.sums.assign(static_cast<size_t>(cols * num_experts), 0.0);
    e.counts.assign(static_cast<size_t>(num_experts), 0);
  }
  if (e.cols != cols || e.num_experts() != num_experts || expert < 0 || expert >= num_experts) {
    fail("imatrix: ", name, " seen as ", num_experts, " x ", cols, " (expert ", expert, "), first as ",
         e.num_experts(), " x ", e.cols);
  }
  double* sums = e.sums.data() + expert * cols;
  for (int64_t r = 0; r < num_rows; ++r) {
    const float* row = x + r * cols;
    for (int64_t c = 0; c < cols; ++c) sums[c] += static_cast<double>(row[c]) * row[c];
  }
  e.counts[static_cast<size_t>(expert)] += num_rows;
}

std::vector<float> Imatrix::mean(const std::string& name, int64_t expert) const {
  const auto it = entries.find(name);
  if (it == entries.end() || expert < 0 || expert >= it->second.num_experts()) return {};
  const ImatrixEntry& e = it->second;
  const int64_t count = e.counts[static_cast<size_t>(expert)];
  if (count <= 0) return {};
  std::vector<float> m(static_cast<size_t>(e.cols));
  for (int64_t c = 0; c < e.cols; ++c) {
    m[static_cast<size_t>(c)] = static_cast<float>(e.sums[static_cast<size_t>(expert * e.cols + c)] / count);
  }
  return m;
}

void Imatrix::write(const std::string& path) const {
  GgufWriter w;
  w.add_string("general.type", "imatrix");
  w.add_string_array("imatrix.datasets", datasets);
  w.add_u32("imatrix.chunk_count", chunk_count);
  w.add_u32("imatrix.chunk_size", chunk_size);
  for (const auto& [name, e] : entries) {  // a std::map: sorted by name, as llama.cpp writes
    std::vector<float> sums(e.sums.begin(), e.sums.end());
    std::vector<float> counts(e.counts.begin(), e.counts.end());
    const auto n = static_cast<uint64_t>(e.num_experts());
    w.add_tensor(name + ".in_sum2", DType::kF32, {static_cast<uint64_t>(e.cols), n},
                 [sums = std::move(sums)](GgufWriter::Sink& s) { s.write(sums.data(), sums.size() * 4); });
    w.add_tensor(name + ".counts", DType::kF32, {1, n},
                 [counts = std::move(counts)](GgufWriter::Sink& s) { s.write(counts.data(), counts.size() * 4); });
  }
  w.write(path);
}

Imatrix Imatrix::read(const std::string& path) {
  auto f = GgufFile::open(path);
  if (f->try_string("general.type") != "imatrix") {
    fail(path, ": not an importance matrix (general.type is not \"imatrix\"; llama.cpp's older .dat "
               "files are not read: convert them with llama-imatrix --in-file)");
  }
  Imatrix m;
  if (f->has("imatrix.datasets")) m.datasets = f->get_string_array("imatrix.datasets");
  m.chunk_count = static_cast<uint32_t>(f->try_u64("imatrix.chunk_count").value_or(0));
  m.chunk_size = static_cast<uint32_t>(f->try_u64("imatrix.chunk_size").value_or(0));
  const std::string suffix = ".in_sum2";
  for (const GgufTensorInfo& t : f->tensors()) {
    if (t.name.size() <= suffix.size() || t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const std::string name = t.name.substr(0, t.name.size() - suffix.size());
    const GgufTensorInfo* counts = f->find_tensor(name + ".counts");
    if (!counts) fail(path, ": ", t.name, " has no ", name, ".counts");
    if (t.type != DType::kF32 || counts->type != DType::kF32 || t.shape.empty() || t.shape.size() > 2) {
      fail(path, ": ", t.name, " is not a 2-D F32 tensor");
    }
    const uint64_t cols = t.shape[0], n = t.shape.size() > 1 ? t.shape[1] : 1;
    if (counts->num_elements != n) fail(path, ": ", name, ".counts holds ", counts->num_elements, " values, not ", n);
    ImatrixEntry e;
    e.cols = static_cast<int64_t>(cols);
    e.sums.resize(cols * n);
    e.counts.resize(n);
    const auto* s = reinterpret_cast<const uint8_t*>(t.data);
    for (uint64_t i = 0; i < cols * n; ++i) {
      float v;
      std::memcpy(&v, s + 4 * i, 4);
      e.sums[i] = v;
    }
    for (uint64_t i = 0; i < n; ++i) {
      float v;
      std::memcpy(&v, counts->data + 4 * i, 4);
      if (!(v >= 0) || v != std::floor(v)) fail(path, ": ", name, ".counts holds ", v);
      e.counts[i] = static_cast<int64_t>(v);
    }
    m.entries.emplace(name, std::move(e));
  }
  return m;
}

namespace {

// Where each file tensor lies in memory, to name the weights a product is handed.
struct TensorSpan {
  const uint8_t* begin;
  const uint8_t* end;
  std::string name;     // GGUF name
  int64_t num_experts;  // 3-D tensors: experts stacked, each a matrix of its own
};

class MatmulObserver final : public ForwardingBackend {
 public:
  MatmulObserver(Backend& inner, const ModelFile& file, MatmulInputSink sink)
      : ForwardingBackend(inner), sink_(std::move(sink)) {
    const Architecture* arch = find_architecture(file.config().architecture);
    for (const TensorRef& t : file.tensors()) {
      const std::string name = gguf_tensor_name(t.name, arch);
      if (t.shape.size() < 2 || name.rfind("blk.", 0) != 0 || t.data == nullptr) continue;
      const int64_t experts = t.shape.size() > 2 ? static_cast<int64_t>(t.shape[2]) : 1;
      spans_.push_back({t.data, t.data + t.num_bytes, name, experts});
    }
    std::sort(spans_.begin(), spans_.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
  }

  // The inputs are read on the host (the sink), so the inner backend's memory must be too.
  void matmul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y) override {
    collect(w, x, num_tokens, nullptr);
    inner_.matmul(w, x, num_tokens, y);
  }
  void matmul_many(std::initializer_list<Product> products, const float* x, int64_t num_tokens) override {
    const TensorSpan* last = nullptr;
    for (const Product& p : products) last = collect(*p.w, x, num_tokens, last);
    inner_.matmul_many(products, x, num_tokens);
  }

 private:
  // Adds x to the entry of the tensor w lies in, unless that tensor is `same` (a second view of
  // it in one call) or the previous product had the same tensor and input (views taken one by
  // one). Returns the tensor, or null for weights not collected.
  const TensorSpan* collect(const WeightMatrix& w, const float* x, int64_t num_tokens, const TensorSpan* same) {
    auto it = std::upper_bound(spans_.begin(), spans_.end(), w.data,
                               [](const uint8_t* p, const TensorSpan& s) { return p < s.begin; });
    if (it == spans_.begin() || num_tokens <= 0) return nullptr;
    const TensorSpan& span = *std::prev(it);
    if (w.data >= span.end) return nullptr;
    const int64_t expert_bytes = (span.end - span.begin) / span.num_experts;
    const int64_t expert = (w.data - span.begin) / expert_bytes;
    if (&span == same || (&span == last_span_ && x == last_x_ && num_tokens == last_tokens_ &&
                          expert == last_expert_)) {
      return &span;
    }
    last_span_ = &span;
    last_x_ = x;
    last_tokens_ = num_tokens;
    last_expert_ = expert;
    sink_(span.name, expert, span.num_experts, x, num_tokens, w.cols);
    return &span;
  }

  MatmulInputSink sink_;
  std::vector<TensorSpan> spans_;
  const TensorSpan* last_span_ = nullptr;
  const float* last_x_ = nullptr;
  int64_t last_tokens_ = 0, last_expert_ = -1;
};

}  // namespace

std::unique_ptr<Backend> make_matmul_observer(Backend& inner, const ModelFile& file, MatmulInputSink sink) {
  return std::make_unique<MatmulObserver>(inner, file, std::move(sink));
}

std::unique_ptr<Backend> make_imatrix_collector(Backend& inner, const ModelFile& file, Imatrix& imatrix) {
  return make_matmul_observer(inner, file,
                              [&imatrix](const std::string& name, int64_t expert, int64_t num_experts,
                                         const float* x, int64_t rows, int64_t cols) {
                                imatrix.add(name, expert, num_experts, x, rows, cols);
                              });
}

std::vector<std::vector<TokenId>> imatrix_chunks(const std::vector<TokenId>& text, int32_t ctx,
                                                 TokenId bos, int64_t max_chunks) {
  if (ctx < 1) fail("imatrix: chunks of ", ctx, " tokens");
  std::vector<std::vector<TokenId>> chunks;
  for (size_t at = 0; at + static_cast<size_t>(ctx) <= text.size(); at += static_cast<size_t>(ctx)) {
    if (max_chunks > 0 && static_cast<int64_t>(chunks.size()) == max_chunks) break;
    chunks.emplace_back(text.begin() + static_cast<std::ptrdiff_t>(at),
                        text.begin() + static_cast<std::ptrdiff_t>(at) + ctx);
    if (bos != kNoToken) chunks.back()[0] = bos;
  }
  return chunks;
}

CalibrationText calibration_chunks(const ModelFile& file, const std::string& path, int32_t ctx,
                                   int64_t max_chunks, const std::string& ctx_option) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot read");
  std::stringstream text;
  text << in.rdbuf();
  auto tokenizer = Tokenizer::create(file.vocab());
  const Vocab& vocab = tokenizer->vocab();
  std::vector<TokenId> tokens;
  const bool bos = vocab.add_bos && vocab.valid(vocab.bos);
  if (bos) tokens.push_back(vocab.bos);
  for (TokenId t : tokenizer->encode(text.str())) tokens.push_back(t);
  CalibrationText c{imatrix_chunks(tokens, ctx, bos ? vocab.bos : kNoToken, max_chunks), tokens.size()};
  if (c.chunks.empty()) fail(path, ": ", tokens.size(), " tokens, not enough for one chunk of ", ctx_option, " ", ctx);
  return c;
}

int64_t run_imatrix_chunks(Model& model, Backend& backend, const std::vector<std::vector<TokenId>>& chunks,
                           const std::function<bool(int64_t)>& after_chunk) {
  constexpr int32_t kBlockSize = 16;
  int32_t longest = 1;
  for (const auto& c : chunks) longest = std::max(longest, static_cast<int32_t>(c.size()));
  const int32_t num_blocks = (longest + kBlockSize - 1) / kBlockSize;
  KvStorage kv(model.config(), num_blocks, kBlockSize, KvType::kF32, &backend);
  std::vector<float> logits;
  int64_t done = 0;
  for (const auto& chunk : chunks) {
    ForwardBatch b;
    b.block_size = kBlockSize;
    b.max_blocks_per_seq = num_blocks;
    b.query_start = {0, static_cast<int32_t>(chunk.size())};
    for (int32_t k = 0; k < num_blocks; ++k) b.block_table.push_back(k);
    for (size_t p = 0; p < chunk.size(); ++p) {
      b.token_ids.push_back(chunk[p]);
      b.positions.push_back(static_cast<int32_t>(p));
      b.slot_mapping.push_back(static_cast<int64_t>(p));
      // Every row's logits: so the last layer's feed-forward runs for every token, as in
      // llama-imatrix (the model skips it for rows nobody reads).
      b.logit_rows.push_back(static_cast<int32_t>(p));
    }
    model.forward(backend, b, kv, logits);
    ++done;
    if (after_chunk && !after_chunk(done)) break;
  }
  return done;
}

}  // namespace pagoda
