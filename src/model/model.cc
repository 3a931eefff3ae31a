#include "model/model.h"

#include "core/error.h"
#include "model/model_file.h"

namespace pagoda {

AttentionBatch ForwardBatch::attention_batch() const {
  AttentionBatch b;
  b.num_tokens = num_tokens();
  b.positions = positions.data();
  b.slot_mapping = slot_mapping.data();
  b.num_seqs = num_seqs();
  b.query_start = query_start.data();
  b.block_table = block_table.data();
  b.max_blocks_per_seq = max_blocks_per_seq;
  b.block_size = block_size;
  return b;
}

std::unique_ptr<Model> Model::load(const ModelFile& file) {
  const std::string& arch = file.config().architecture;
  if (arch == "llama" || arch == "mistral" || arch == "qwen2" || arch == "qwen3") {
    return load_llama(file);
  }
  if (arch == "gemma3") return load_gemma3(file);
  fail(file.path(), ": architecture '", arch,
       "' is not supported (supported: llama, mistral, qwen2, qwen3, gemma3)");
}

}  // namespace pagoda
