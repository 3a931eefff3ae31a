// Hugging Face tokenizer.json -> Vocab, and the bounded JSON parse every Hugging Face reader
// (safetensors header, config.json, tokenizer.json) goes through.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <string_view>

#include "tokenizer/vocab.h"

namespace pagoda {

// Parses untrusted JSON. Syntax errors and nesting deeper than `max_depth` (checked before the
// parser builds anything, so "[[[[..." cannot exhaust memory) become one Error naming `source`.
nlohmann::json parse_json(std::string_view text, const std::string& source, int max_depth = 64);

// Reads a tokenizer.json whose model.type is "BPE"; `source` names it in errors.
//
// SentencePiece-style BPE (Llama-2, TinyStories, Mistral, Gemma...): recognised by "▁" (U+2581)
// handling, either a normalizer that Prepends "▁" / Replaces " " with "▁", or a Metaspace
// pre-tokenizer. Gives kind kSpm, model "llama", `merges` filled (rank = index), no scores.
// add_space_prefix is true when the normalizer Prepends "▁" or Metaspace prepends (scheme
// "first"/"always" or add_prefix_space). byte_fallback is not required.
//
// Byte-level BPE (GPT-2, Llama-3, Qwen2...): recognised by a ByteLevel pre-tokenizer (alone or in
// a Sequence). Gives kind kBpe, model "gpt2", and `pre` guessed: the pre-tokenizer's steps
// (Split regexes, Digits, ByteLevel's own regex) are turned into a regex list and compared, by
// exact text, with the lists of the names pre_tokenizer_spec knows, preferring the one whose
// ignore_merges matches model.ignore_merges. No match, or a step with no regex form (an inverted
// Split, a non-"Isolated" behaviour), gives "default" (GPT-2's split): a best guess that may
// tokenize some inputs differently from the model's reference tokenizer.
//
// Token types: added tokens with special=true -> kControl (kUnknown for the unk token), other
// added tokens -> kUserDefined (matched whole before BPE, as the HF tokenizer does), "<0xXX>"
// tokens of an SPM vocabulary -> kByte, the rest kNormal. BOS/EOS come from a TemplateProcessing
// post-processor (a leading SpecialToken sets bos and add_bos, a trailing one eos and add_eos).
// Other model types (WordPiece, Unigram, WordLevel) throw "not supported yet".
Vocab vocab_from_hf_tokenizer_json(const std::string& json_text, const std::string& source);

}  // namespace pagoda
