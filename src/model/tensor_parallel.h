// Tensor parallelism across ranks (Megatron's split): each rank holds whole KV-head groups of
// attention (their Q/K/V rows and the matching columns of the output projection), a slice of the
// feed-forward columns (gate/up rows, down columns) and a slice of the vocabulary (embedding and
// output rows). A layer then needs two sums across ranks (after the attention output and after
// the down projection) and a step one more (the embedding) plus a gather of the logits to rank 0.
//
// The control plane (scheduler, block pool, prefix cache, sampling) runs once, on rank 0: each
// step it sends the step's integers (the forward batch and the block copies) and every rank runs
// its slice of the same forward pass on its own slice of the KV cache (its KV heads of every
// block). The other ranks only follow (follow_steps) until rank 0 says stop.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"

namespace pagoda {

class Communicator;
class KvStorage;
struct BlockCopy;

// Units [first, first + count) of `units` split as evenly as possible over `size` ranks, the
// first ranks taking one more when it does not divide.
struct UnitRange {
  int64_t first = 0;
  int64_t count = 0;
};
UnitRange split_units(int64_t units, int rank, int size);

// This rank's shape of the model: heads, KV heads and feed-forward width are its slice's; the
// vocabulary stays whole (rank 0 gathers full logits). Throws Error naming the heads and the rank
// count when the ranks do not divide the KV heads.
struct TensorSlices {
  UnitRange kv_heads;  // this rank's KV heads; its query heads are the groups sharing them
  UnitRange heads;
  UnitRange ffn;       // feed-forward columns
  UnitRange vocab;     // embedding / output rows
};
TensorSlices tensor_slices(const ModelConfig& config, int64_t ffn_block, const std::string& source,
                           int rank, int size);

// Rank 0's messages: the step's forward pass, the block copies before it, the end.
void send_forward(Communicator& tp, const ForwardBatch& batch, const KvStorage& kv);
void send_block_copies(Communicator& tp, std::span<const BlockCopy> copies, const KvStorage& kv);
void send_stop(Communicator& tp);

// The other ranks' loop: runs the steps rank 0 sends on this rank's slice of `model`, in a KV
// cache of the shape rank 0's has, until rank 0 sends stop.
void follow_steps(Model& model, Backend& backend);

// The embedding lookup of a vocabulary slice: rows of tokens outside it are zero, so the sum
// across ranks is the whole lookup.     x: [n, hidden]
void embed_slice(Backend& backend, const WeightMatrix& rows, UnitRange vocab,
                 const int32_t* token_ids, int64_t n, int64_t hidden, float* x);

// Rank 0 gets [rows, vocab] logits from each rank's [rows, its vocab slice] ones.
void gather_logits(Communicator& tp, const ModelConfig& config, std::span<const float> local,
                   int64_t rows, std::vector<float>& logits);

}  // namespace pagoda
