#include "model/tensor_parallel.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "comm/communicator.h"
#include "model/kv_copy.h"
#include "model/kv_storage.h"

namespace pagoda {

UnitRange split_units(int64_t units, int rank, int size) {
  const int64_t base = units / size, extra = units % size;
  const int64_t first = rank * base + std::min<int64_t>(rank, extra);
  return {first, base + (rank < extra ? 1 : 0)};
}

TensorSlices tensor_slices(const ModelConfig& c, int64_t ffn_block, const std::string& source,
                           int rank, int size) {
  if (c.num_kv_heads % static_cast<uint32_t>(size) != 0) {
    fail(source, ": ", size, " ranks do not divide the model's ", c.num_kv_heads,
         " KV heads (", c.num_heads, " query heads); each rank holds whole KV heads, so use a "
         "rank count that divides ", c.num_kv_heads);
  }
  TensorSlices s;
  s.kv_heads = split_units(c.num_kv_heads, rank, size);
  const int64_t group = c.num_heads / c.num_kv_heads;
  s.heads = {s.kv_heads.first * group, s.kv_heads.count * group};
  // The down projection's columns are cut on its blocks: whole blocks per rank.
  const int64_t ffn_blocks = c.intermediate_size / ffn_block;
  if (ffn_blocks < size) {
    fail(source, ": its feed-forward width ", c.intermediate_size, " (", ffn_blocks,
         " blocks of ", ffn_block, ") is too narrow to split over ", size, " ranks");
  }
  const UnitRange b = split_units(ffn_blocks, rank, size);
  s.ffn = {b.first * ffn_block, b.count * ffn_block};
  s.vocab = split_units(c.vocab_size, rank, size);
  return s;
}

namespace {

enum class StepKind : int64_t { kForward = 1, kBlockCopies = 2, kStop = 3 };

// Every message is this header, then `payload_bytes` bytes.
struct StepHeader {
  int64_t kind = 0;
  int64_t num_blocks = 0, block_size = 0, kv_type = 0;  // the KV cache's shape
  int64_t num_tokens = 0, num_query_starts = 0, num_block_table = 0, max_blocks_per_seq = 0;
  int64_t batch_block_size = 0, num_logit_rows = 0, num_copies = 0;
  int64_t payload_bytes = 0;
};

class Writer {
 public:
  template <class T>
  void put(const std::vector<T>& v) {
    const size_t at = bytes.size();
    bytes.resize(at + v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(bytes.data() + at, v.data(), v.size() * sizeof(T));
  }
  std::vector<uint8_t> bytes;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& b) : bytes_(b) {}
  template <class T>
  void get(std::vector<T>& v, int64_t count) {
    const size_t n = static_cast<size_t>(count) * sizeof(T);
    if (at_ + n > bytes_.size()) fail("tensor parallel: a step message is shorter than its header");
    v.resize(static_cast<size_t>(count));
    if (n) std::memcpy(v.data(), bytes_.data() + at_, n);
    at_ += n;
  }

 private:
  const std::vector<uint8_t>& bytes_;
  size_t at_ = 0;
};

StepHeader kv_header(StepKind kind, const KvStorage& kv) {
  StepHeader h;
  h.kind = static_cast<int64_t>(kind);
  h.num_blocks = kv.num_blocks();
  h.block_size = kv.block_size();
  h.kv_type = static_cast<int64_t>(kv.type());
  return h;
}

void send(Communicator& tp, StepHeader h, std::vector<uint8_t> payload) {
  h.payload_bytes = static_cast<int64_t>(payload.size());
  tp.broadcast(&h, sizeof h);
  if (!payload.empty()) tp.broadcast(payload.data(), payload.size());
}

}  // namespace

void send_forward(Communicator& tp, const ForwardBatch& batch, const KvStorage& kv) {
  StepHeader h = kv_header(StepKind::kForward, kv);
  h.num_tokens = batch.num_tokens();
  h.num_query_starts = static_cast<int64_t>(batch.query_start.size());
  h.num_block_table = static_cast<int64_t>(batch.block_table.size());
  h.max_blocks_per_seq = batch.max_blocks_per_seq;
  h.batch_block_size = batch.block_size;
  h.num_logit_rows = static_cast<int64_t>(batch.logit_rows.size());
  Writer w;
  w.put(batch.token_ids);
  w.put(batch.positions);
  w.put(batch.slot_mapping);
  w.put(batch.query_start);
  w.put(batch.block_table);
  w.put(batch.logit_rows);
  send(tp, h, std::move(w.bytes));
}

void send_block_copies(Communicator& tp, std::span<const BlockCopy> copies, const KvStorage& kv) {
  StepHeader h = kv_header(StepKind::kBlockCopies, kv);
  h.num_copies = static_cast<int64_t>(copies.size());
  Writer w;
  w.put(std::vector<BlockCopy>(copies.begin(), copies.end()));
  send(tp, h, std::move(w.bytes));
}

void send_stop(Communicator& tp) { send(tp, StepHeader{.kind = int64_t(StepKind::kStop)}, {}); }

void follow_steps(Model& model, Backend& backend) {
  Communicator& tp = *model.tensor_parallel();
  std::unique_ptr<KvStorage> kv;
  std::vector<float> logits;
  std::vector<uint8_t> payload;
  for (;;) {
    StepHeader h;
    tp.broadcast(&h, sizeof h);
    payload.resize(static_cast<size_t>(h.payload_bytes));
    if (!payload.empty()) tp.broadcast(payload.data(), payload.size());
    const auto kind = static_cast<StepKind>(h.kind);
    if (kind == StepKind::kStop) return;
    // Rank 0 may make a new cache (another engine); this rank's follows its shape.
    if (!kv || kv->num_blocks() != h.num_blocks || kv->block_size() != h.block_size ||
        static_cast<int64_t>(kv->type()) != h.kv_type) {
      kv.reset();
      kv = std::make_unique<KvStorage>(model.config(), static_cast<int32_t>(h.num_blocks),
                                       static_cast<int32_t>(h.block_size),
                                       static_cast<KvType>(h.kv_type), &backend);
    }
    Reader r(payload);
    if (kind == StepKind::kBlockCopies) {
      std::vector<BlockCopy> copies;
      r.get(copies, h.num_copies);
      copy_kv_blocks(backend, *kv, model.config(), copies);
      continue;
    }
    if (kind != StepKind::kForward) fail("tensor parallel: unknown step message ", h.kind);
    ForwardBatch b;
    r.get(b.token_ids, h.num_tokens);
    r.get(b.positions, h.num_tokens);
    r.get(b.slot_mapping, h.num_tokens);
    r.get(b.query_start, h.num_query_starts);
    r.get(b.block_table, h.num_block_table);
    r.get(b.logit_rows, h.num_logit_rows);
    b.max_blocks_per_seq = static_cast<int32_t>(h.max_blocks_per_seq);
    b.block_size = static_cast<int32_t>(h.batch_block_size);
    model.forward_local(backend, b, *kv, logits);
  }
}

void embed_slice(Backend& backend, const WeightMatrix& rows, UnitRange vocab,
                 const int32_t* token_ids, int64_t n, int64_t hidden, float* x) {
  std::fill(x, x + n * hidden, 0.0f);
  std::vector<int32_t> local_ids, at;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = token_ids[i] - vocab.first;
    if (id < 0 || id >= vocab.count) continue;
    local_ids.push_back(static_cast<int32_t>(id));
    at.push_back(static_cast<int32_t>(i));
  }
  if (local_ids.empty()) return;
  std::vector<float> found(local_ids.size() * static_cast<size_t>(hidden));
  backend.embed(rows, local_ids.data(), static_cast<int64_t>(local_ids.size()), found.data());
  for (size_t j = 0; j < at.size(); ++j) {
    std::copy_n(found.data() + j * static_cast<size_t>(hidden), hidden,
                x + static_cast<int64_t>(at[j]) * hidden);
  }
}

void gather_logits(Communicator& tp, const ModelConfig& config, std::span<const float> local,
                   int64_t rows, std::vector<float>& logits) {
  const int size = tp.size();
  const int64_t vocab = config.vocab_size;
  std::vector<size_t> counts;
  std::vector<float> all;
  if (tp.leader()) {
    for (int r = 0; r < size; ++r) {
      counts.push_back(static_cast<size_t>(rows * split_units(vocab, r, size).count));
    }
    all.resize(static_cast<size_t>(rows * vocab));
  }
  tp.gather(local, all, counts);
  if (!tp.leader()) return;
  // [rank][row][its vocab] -> [row][vocab]
  logits.resize(static_cast<size_t>(rows * vocab));
  const float* from = all.data();
  for (int r = 0; r < size; ++r) {
    const UnitRange v = split_units(vocab, r, size);
    for (int64_t i = 0; i < rows; ++i, from += v.count) {
      std::copy_n(from, v.count, logits.data() + i * vocab + v.first);
    }
  }
}

}  // namespace pagoda
