// Pre-tokenization for byte-level BPE: the text is cut into pieces by a sequence of regexes before
// BPE runs on each piece. Each regex cuts every piece from the previous one into its matches and
// the gaps between them, both kept in order, so the pieces always cover the text exactly (this is
// a Hugging Face "Split" with behavior "Isolated", and how llama.cpp applies its regex lists).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

struct PreTokenizerSpec {
  std::vector<std::string> patterns;  // PCRE2 syntax, applied in order
  // Take a piece whole when it is itself a token, before trying merges (Llama 3's
  // "ignore_merges"); the merges would not always rebuild such a token.
  bool ignore_merges = false;
};

// The spec a tokenizer.ggml.pre name stands for; throws Error naming an unknown name.
const PreTokenizerSpec& pre_tokenizer_spec(std::string_view name);
// Every name pre_tokenizer_spec accepts, sorted.
std::vector<std::string> pre_tokenizer_names();

class PreTokenizer {
 public:
  // Compiles the patterns once (with JIT where available); throws Error for a bad pattern.
  explicit PreTokenizer(const std::vector<std::string>& patterns);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the pieces of `text` to `out`: views into `text`, in order, none empty, covering it.
  // Safe to call from several threads at once. Bytes that are not valid UTF-8 never match a
  // pattern, so they end up in gaps.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  struct Pattern;
  std::vector<std::unique_ptr<Pattern>> patterns_;
};

}  // namespace pagoda
