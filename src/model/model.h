// A loaded model: hyper-parameters, weights (views into the mapped file) and one forward
// function per architecture family.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"

namespace pagoda {

class ModelFile;
class KvStorage;
struct OutputRows;
class Communicator;

// One step's tokens, laid out for the forward pass (see AttentionBatch for the K/V side).
struct ForwardBatch {
  std::vector<int32_t> token_ids;     // [num_tokens]
  std::vector<int32_t> positions;     // [num_tokens]
  std::vector<int64_t> slot_mapping;  // [num_tokens]
  std::vector<int32_t> query_start;   // [num_seqs + 1]
  std::vector<int32_t> block_table;   // [num_seqs, max_blocks_per_seq]
  int32_t max_blocks_per_seq = 0;
  int32_t block_size = 16;
  std::vector<int32_t> logit_rows;    // token rows whose logits are wanted, in output order
  // Embeddings from a generative model: the forward pass leaves each logit row's hidden state
  // after the final norm ([rows, hidden]) where the logits would go.
  bool hidden_states = false;
  // The LoRA adapter of each token (0: none; model/lora.h): empty when no sequence has one.
  std::vector<int32_t> adapters;
  // Empty, or [logit_rows.size()]: 1 where a row wants its final-norm hidden state (an embedding
  // scheduled beside generation) instead of its logits. The output then holds the logits of the
  // other rows, [rows, vocab], followed by the hidden states, [rows, hidden], each in row order.
  std::vector<uint8_t> hidden_row;
  // Hybrid models (Qwen3.5): each sequence's recurrent state slot in the cache's StateStorage
  // ([num_seqs]); empty: the model keeps its own, one per sequence index (one sequence run
  // outside an engine).
  std::vector<int32_t> state_slots;
  // Speculative verification on a hybrid model: per sequence ([num_seqs]; empty: none), how many
  // of its last tokens are proposals. Its state after each token before a proposal goes to the
  // StateStorage's snapshots (those of earlier sequences first): snapshot j holds the state with
  // j proposals accepted; the state after all of them is its slot's.
  std::vector<int32_t> state_snapshots;

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_seqs() const { return static_cast<int32_t>(query_start.size()) - 1; }
  AttentionBatch attention_batch() const;
};

// The buffers one step works in, in the backend's memory, grown to the largest batch seen;
// shared by every family.
struct Activations {
  BackendArray x;       // [num_tokens, hidden] residual stream
  BackendArray h;       // [num_tokens, hidden] normed input / output of a block
  BackendArray q;       // [num_tokens, heads * head_dim]
  BackendArray k;       // [num_tokens, kv_heads * head_dim]
  BackendArray v;       // [num_tokens, kv_heads * head_dim]
  BackendArray attn;    // [num_tokens, heads * head_dim]
  BackendArray gate;    // [num_tokens, ffn]
  BackendArray up;      // [num_tokens, ffn]
  BackendArray last;    // [num_logit_rows, hidden]
  BackendArray logits;  // [num_logit_rows, vocab] where the host cannot read the backend's memory

  void resize(Backend& backend, int64_t num_tokens, const ModelConfig& config);
};

// Attention shape and the usual 1/sqrt(head_dim) scale, no window.
AttentionParams attention_params(const ModelConfig& config);

// Only the rows whose logits are wanted go through the final norm and the vocabulary matrix:
// logits = output · rms_norm(x[rows]), brought to the host.   logits: [rows.size(), vocab]
void compute_logits(Backend& backend, const ModelConfig& config, std::span<const int32_t> rows,
                    const std::vector<float>& output_norm, const WeightMatrix& output,
                    Activations& act, std::vector<float>& logits);

// compute_logits for the rows `out` names; when its batch asks for hidden_states, `logits` gets
// the final-norm hidden state of each row instead ([rows, hidden]).
void compute_logits(Backend& backend, const ModelConfig& config, const OutputRows& out,
                    const std::vector<float>& output_norm, const WeightMatrix& output,
                    Activations& act, std::vector<float>& logits);

// The last layer's attention output and feed-forward block matter only for the rows whose
// logits are wanted; its K and V are written for every token before that. When those rows are
// fewer than the tokens (a prompt chunk wants one, or none), the forward pass gathers them to the
// front (gather) and runs the rest of the last layer on them alone, as llama.cpp does. Every
// row's result is the one the full batch gives it: each op treats rows independently.
struct OutputRows {
  explicit OutputRows(const ForwardBatch& batch);

  // The narrowed rows attend as a batch of their own: the same sequences, block tables and
  // positions, one query row per sequence that wants logits (none for the others).
  AttentionBatch attention_batch() const;
  // When narrowing: gathers the rows of act.q ([num_tokens, q_dim]) and act.x ([num_tokens,
  // hidden]) to the front, in place, and returns true.
  bool gather_front(Backend& backend, Activations& act, int64_t q_dim, int64_t hidden) const;
  // The rows compute_logits reads after the last layer.
  std::span<const int32_t> logit_rows() const;
  int64_t count() const { return static_cast<int64_t>(front.size()); }

  const ForwardBatch& batch;
  bool narrows = false;        // fewer rows than tokens, in ascending order
  std::vector<int32_t> front;  // 0 .. count - 1: the rows once gathered
  std::vector<int32_t> positions, query_start;
  std::vector<int64_t> slot_mapping;
};

class Model {
 public:
  // Picks the architecture from the file; throws Error naming an unsupported one. With `tp`
  // (tensor parallel, more than one rank) this rank keeps only its slice of the weights and
  // of the KV heads (model/tensor_parallel.h); rank 0 drives the others through forward() and
  // copy_kv_blocks(), the others run follow_steps().
  static std::unique_ptr<Model> load(const ModelFile& file, Communicator* tp = nullptr);
  virtual ~Model() = default;

  const ModelConfig& config() const { return config_; }
  // Bytes of the weights as stored (what decode has to stream per token).
  uint64_t weight_bytes() const { return weight_bytes_; }

  // Lets the backend prepare every weight matrix (Backend::prepare) before the first forward.
  void prepare(Backend& backend) const {
    for (const WeightMatrix& w : matrices_) backend.prepare(w);
  }

  // Runs every token of the batch through the model, writing K/V into `kv`, and leaves the
  // logits of batch.logit_rows in `logits`: [logit_rows.size(), vocab_size]. Under tensor
  // parallelism rank 0 first sends the step to the other ranks.
  void forward(Backend& backend, const ForwardBatch& batch, KvStorage& kv,
               std::vector<float>& logits);
  // Copies whole blocks of K/V, every layer (copy-on-write of forks), on every rank, through
  // the backend that holds `kv`.
  void copy_kv_blocks(Backend& backend, KvStorage& kv, std::span<const BlockCopy> copies);

  // Every token's last hidden state, [num_tokens, hidden] on the host, for embeddings: an
  // encoder's (BERT: the whole of each sequence of the batch at once, no cache). The batch's
  // token_ids, positions and query_start are read. Generative families refuse.
  virtual void hidden_states(Backend& backend, const ForwardBatch& batch, std::vector<float>& out);

  // The ranks this model is split over; null when it is whole.
  Communicator* tensor_parallel() const { return tp_; }
  // This rank's part of the step rank 0 sent (follow_steps); on rank 0 the logits are every
  // rank's, on the others `logits` is left as it is.
  virtual void forward_local(Backend& backend, const ForwardBatch& batch, KvStorage& kv,
                             std::vector<float>& logits) = 0;

 protected:
  Communicator* tp_ = nullptr;
  ModelConfig config_;
  uint64_t weight_bytes_ = 0;
  std::vector<WeightMatrix> matrices_;  // every matrix the forward pass multiplies by
};

std::unique_ptr<Model> load_llama(const ModelFile& file, Communicator* tp);

// Llama 3 RoPE scaling as divisors of each rotary frequency ([rotary_dim / 2]): 1 for high
// frequencies (wavelength < original context / high_freq_factor), `factor` for low ones
// (wavelength > original context / low_freq_factor), and a smooth blend between.
std::vector<float> llama3_rope_freq_factors(const ModelConfig& c, int32_t rotary_dim);
// Linear and YaRN scaling and the attention factor of `c` set on `p` (whose rotary_dim and
// theta are set), as llama.cpp computes them: positions scaled by 1 / factor, YaRN's correction
// range from the original context and beta_fast / beta_slow, its mscale 0.1 * ln(factor) + 1.
void apply_rope_scaling(const ModelConfig& c, RopeParams& p);
std::unique_ptr<Model> load_gemma3(const ModelFile& file, Communicator* tp);
std::unique_ptr<Model> load_gemma4(const ModelFile& file, Communicator* tp);
std::unique_ptr<Model> load_gpt_oss(const ModelFile& file, Communicator* tp);
std::unique_ptr<Model> load_qwen35(const ModelFile& file, Communicator* tp);
std::unique_ptr<Model> load_bert(const ModelFile& file, Communicator* tp);

}  // namespace pagoda
