#include "format/gguf_vocab.h"

#include <string>
#include <vector>

#include "core/error.h"
#include "format/gguf.h"

namespace pagoda {

namespace {

TokenId optional_id(const GgufFile& f, const char* key, TokenId fallback) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return fallback;
  // Converters write -1 (or all ones, unsigned) for "no such token".
  if (v->is_signed() && v->i == -1) return kNoToken;
  uint64_t id = f.get_u64(key);
  if (id == UINT32_MAX || id == UINT64_MAX) return kNoToken;
  if (id > static_cast<uint64_t>(INT32_MAX)) fail(f.name(), ": metadata key '", key, "' is too large");
  return static_cast<TokenId>(id);
}

}  // namespace

Vocab vocab_from_gguf(const GgufFile& f) {
  Vocab v;
  v.model = f.get_string("tokenizer.ggml.model");
  v.pre = f.try_string("tokenizer.ggml.pre").value_or("default");
  v.tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (f.has("tokenizer.ggml.scores")) v.scores = f.get_f32_array("tokenizer.ggml.scores");
  if (f.has("tokenizer.ggml.token_type")) {
    for (int64_t t : f.get_int_array("tokenizer.ggml.token_type")) {
      if (t < 0 || t > static_cast<int64_t>(TokenType::kByte)) {
        fail(f.name(), ": metadata key 'tokenizer.ggml.token_type' holds unknown type ", t);
      }
      v.types.push_back(static_cast<TokenType>(t));
    }
  }

  // Defaults follow what each family's reference tokenizer does when the key is absent.
  TokenId bos = kNoToken, eos = kNoToken, unk = kNoToken, sep = kNoToken, cls = kNoToken;
  if (v.model == "llama") {
    v.kind = TokenizerKind::kSpm;
    bos = 1; eos = 2; unk = 0;
    v.add_bos = true;
    v.add_space_prefix = true;
  } else if (v.model == "gpt2") {
    v.kind = TokenizerKind::kBpe;
    v.add_space_prefix = false;
  } else if (v.model == "gemma4") {
    // SentencePiece-style pieces ("▁" for spaces, <0xXX> byte tokens) merged by rank, with no
    // space prefix; llama.cpp always adds BOS for it.
    v.kind = TokenizerKind::kSpm;
    v.add_space_prefix = false;
    v.add_bos = true;
  } else if (v.model == "bert") {
    v.kind = TokenizerKind::kWordPiece;
    v.add_space_prefix = false;
    unk = 100; sep = 102; cls = 101;
    bos = cls; eos = sep;
    v.add_bos = true;
    v.add_eos = true;
  } else {
    fail(f.name(), ": tokenizer model '", v.model,
         "' is not supported (supported: llama (SentencePiece BPE), gemma4 (SentencePiece-style BPE "
         "by merge rank), gpt2 (byte-level BPE), bert (WordPiece))");
  }
  // Byte-level BPE needs its merges. A "llama" vocabulary may carry them too (pagoda convert
  // writes them from a tokenizer.json beside the scores): its ranks then order the merges exactly
  // as the Hugging Face tokenizer does, where scores only approximate them. llama.cpp reads merges
  // for BPE vocabularies only, so the scores stay what it uses.
  if (v.kind == TokenizerKind::kBpe || v.kind == TokenizerKind::kSpm) {
    for (const std::string& m : f.has("tokenizer.ggml.merges")
                                    ? f.get_string_array("tokenizer.ggml.merges")
                                    : std::vector<std::string>{}) {
      size_t sp = m.find(' ', 1);
      if (sp == std::string::npos) {
        fail(f.name(), ": metadata key 'tokenizer.ggml.merges' entry '", m, "' has no space");
      }
      v.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
    }
  }
  v.bos = optional_id(f, "tokenizer.ggml.bos_token_id", bos);
  v.eos = optional_id(f, "tokenizer.ggml.eos_token_id", eos);
  v.eot = optional_id(f, "tokenizer.ggml.eot_token_id", kNoToken);
  v.unk = optional_id(f, "tokenizer.ggml.unknown_token_id", unk);
  v.pad = optional_id(f, "tokenizer.ggml.padding_token_id", kNoToken);
  v.sep = optional_id(f, "tokenizer.ggml.seperator_token_id", sep);
  v.cls = optional_id(f, "tokenizer.ggml.cls_token_id", cls);
  v.mask = optional_id(f, "tokenizer.ggml.mask_token_id", kNoToken);
  v.add_bos = f.try_bool("tokenizer.ggml.add_bos_token").value_or(v.add_bos);
  if (v.model == "gemma4") v.add_bos = true;  // llama.cpp overrides a file's false
  v.add_eos = f.try_bool("tokenizer.ggml.add_eos_token").value_or(v.add_eos);
  v.add_space_prefix = f.try_bool("tokenizer.ggml.add_space_prefix").value_or(v.add_space_prefix);
  v.chat_template = f.try_string("tokenizer.chat_template").value_or("");
  v.build_index(f.name());
  return v;
}

}  // namespace pagoda
