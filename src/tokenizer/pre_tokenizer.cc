#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "core/error.h"

namespace pagoda {

namespace {

// The patterns are the reference tokenizers' own (tokenizer.json, or llama.cpp's list where a
// family has several steps). PCRE2 runs them unchanged, including (?i:...), which llama.cpp
// has to spell out by hand. Raw strings use the delimiter "re" because patterns hold `)"`.

// GPT-2's ByteLevel pre-tokenizer; also GPT-NeoX, MPT, OLMo, Phi-2 and "default" (a vocabulary
// that names no pre-tokenizer is taken to be plain ByteLevel, as the HF converters write it).
constexpr const char* kGpt2 =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re";
// Llama 3 (tiktoken cl100k style): digits in groups of up to three.
constexpr const char* kLlama3 =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
// Qwen2: Llama 3's with single digits.
constexpr const char* kQwen2 =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
// Qwen3.5: Qwen2's with combining marks kept inside words.
constexpr const char* kQwen35 =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
// GPT-4o / o200k (also Llama 4): words split at case changes, contractions attached.
constexpr const char* kGpt4o =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
// Mistral's Tekken.
constexpr const char* kTekken =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kSeedCoder =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kBailingMoe =
    R"re('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)re";
// Poro / BLOOM: everything but whitespace and a few punctuation marks (the parentheses and bar
// inside the class are literal, as in the original).
constexpr const char* kBloom =
    R"re( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+)re";

// DeepSeek's Han / CJK-compatible / Hangul runs (一-龥, ࠀ-一, 가-퟿). Non-ASCII is written
// as escapes throughout: Unicode normalization of the source would silently change some of these
// characters (U+2126 OHM SIGN becomes U+03A9, U+212A KELVIN SIGN becomes "K").
constexpr const char* kDeepseekCjk =
    R"re([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)re";
// DeepSeek LLM's cased-letter ranges (Latin, Greek, Cyrillic, Armenian, Georgian, Cherokee, ...).
constexpr const char* kDeepseekLetters =
    R"re(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})re"
    R"re(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A})re"
    R"re(\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})re"
    R"re(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF})re"
    R"re(\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})re"
    R"re(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D})re"
    R"re(\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4})re"
    R"re(\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4})re"
    R"re(\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124})re"
    R"re(\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F})re"
    R"re(\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})re"
    R"re(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F})re"
    R"re(\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17})re"
    R"re(\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3})re"
    R"re(\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF})re"
    R"re(\x{1E900}-\x{1E943}]+)re";
// ASCII punctuation, full-width forms, curly quotes, ideographic space and full stop.
constexpr const char* kDeepseekPunct =
    R"re(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)re";
constexpr const char* kDeepseekV3Kana =
    R"re([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)re";
constexpr const char* kDeepseekV3 =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

struct Family {
  // tokenizer.ggml.pre values, as llama.cpp's converter writes them.
  std::vector<std::string_view> names;
  PreTokenizerSpec spec;
};

const std::vector<Family>& families() {
  static const std::vector<Family> table = {
      {{"default", "gpt-2", "phi-2", "mpt", "olmo", "jais", "trillion", "granite-docling",
        "exaone4", "jina-es", "jina-de", "jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code",
        "roberta-bpe", "gigachat", "a.x-4.0", "mellum"},
       {{kGpt2}, false}},
      // Llama 3 and the models that reuse its tokenizer.json take in-vocabulary pieces whole.
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
       {{kLlama3}, true}},
      {{"dbrx", "smaug-bpe", "glm4", "chatglm-bpe"}, {{kLlama3}, false}},
      {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan",
        "grok-2"},
       {{kQwen2}, false}},
      {{"qwen35"}, {{kQwen35}, false}},
      {{"gpt-4o", "llama4", "minimax-m2"}, {{kGpt4o}, false}},
      {{"tekken"}, {{kTekken}, true}},
      {{"seed-coder"}, {{kSeedCoder}, false}},
      {{"bailingmoe", "bailingmoe2", "llada-moe"}, {{kBailingMoe}, false}},
      // Single digits first, then GPT-2's split (a Digits pre-tokenizer ahead of ByteLevel).
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"},
       {{R"re(\p{N})re", kGpt2}, false}},
      // Punctuation runs, GPT-2's split, then digit runs cut into threes.
      {{"falcon"}, {{R"re([\p{P}\$\+<=>\^~\|`]+)re", kGpt2, "[0-9][0-9][0-9]"}, false}},
      {{"deepseek-llm"},
       {{R"re([\r\n])re", kDeepseekLetters, kDeepseekPunct, R"re(\s+$)re", kDeepseekCjk,
         R"re(\p{N}+)re"},
        false}},
      {{"deepseek-coder"},
       {{R"re([\r\n])re", R"re(\s?\p{L}+)re", R"re(\s?\p{P}+)re", kDeepseekCjk, R"re(\p{N})re"},
        false}},
      {{"deepseek-v3", "hunyuan-dense"},
       {{R"re(\p{N}{1,3})re", kDeepseekV3Kana, kDeepseekV3}, false}},
      {{"poro-chat", "bloom", "gpt3-finnish"}, {{kBloom}, false}},
      {{"viking"}, {{kBloom, R"re(\p{N})re"}, false}},
  };
  return table;
}

// The reference tokenizers run on Oniguruma, whose Unicode \s also takes U+0085 (NEXT LINE);
// PCRE2's \s with PCRE2_UCP does not. Rewrites \s and \S so the two agree.
std::string widen_whitespace(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  bool class_start = false;  // just after "[" or "[^", where "]" is literal
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char e = pattern[++i];
      class_start = false;
      if (e == 's') {
        out += in_class ? R"(\s\x{85})" : R"([\s\x{85}])";
      } else if (e == 'S' && !in_class) {
        out += R"([^\s\x{85}])";
      } else if (e == 'S') {
        fail("pre-tokenizer pattern '", pattern,
             "': \\S inside a character class is not supported");
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    out += c;
    if (!in_class && c == '[') {
      in_class = true;
      class_start = true;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
    } else if (in_class && c == ']' && !class_start) {
      in_class = false;
    } else {
      class_start = false;
    }
  }
  return out;
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};

}  // namespace

const PreTokenizerSpec& pre_tokenizer_spec(std::string_view name) {
  for (const Family& f : families()) {
    if (std::find(f.names.begin(), f.names.end(), name) != f.names.end()) return f.spec;
  }
  fail("pre-tokenizer '", name, "' (tokenizer.ggml.pre) is not supported");
}

std::vector<std::string> pre_tokenizer_names() {
  std::vector<std::string> names;
  for (const Family& f : families()) names.insert(names.end(), f.names.begin(), f.names.end());
  std::sort(names.begin(), names.end());
  return names;
}

struct PreTokenizer::Pattern {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Pattern() { pcre2_code_free(code); }

  // Cuts `piece` into matches and the gaps between them, appending both to `out`.
  void split(std::string_view piece, pcre2_match_data* md,
             std::vector<std::string_view>& out) const {
    auto subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(md);
    size_t gap_start = 0;
    size_t pos = 0;
    while (pos < piece.size()) {
      int rc = jit ? pcre2_jit_match(code, subject, piece.size(), pos, 0, md, nullptr)
                   : pcre2_match(code, subject, piece.size(), pos, 0, md, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(rc, message, sizeof(message));
        fail("pre-tokenizer: regex match failed: ", reinterpret_cast<const char*>(message));
      }
      size_t begin = ovector[0], end = ovector[1];
      if (begin > gap_start) out.push_back(piece.substr(gap_start, begin - gap_start));
      if (end > begin) {
        out.push_back(piece.substr(begin, end - begin));
        pos = end;
      } else {
        // An empty match only marks a cut; step over one character to make progress.
        pos = begin + 1;
        while (pos < piece.size() && (static_cast<unsigned char>(piece[pos]) & 0xC0) == 0x80) ++pos;
      }
      gap_start = end;
    }
    if (gap_start < piece.size()) out.push_back(piece.substr(gap_start));
  }
};

PreTokenizer::PreTokenizer(const std::vector<std::string>& patterns) {
  std::unique_ptr<pcre2_compile_context, decltype(&pcre2_compile_context_free)> context(
      pcre2_compile_context_create(nullptr), &pcre2_compile_context_free);
  PAGODA_CHECK(context != nullptr);
  // Oniguruma (Ruby syntax), which the reference tokenizers use, makes ^ and $ line anchors at
  // "\n"; PCRE2 does so in multiline mode with LF newlines.
  pcre2_set_newline(context.get(), PCRE2_NEWLINE_LF);
  for (const std::string& source : patterns) {
    std::string text = widen_whitespace(source);
    auto p = std::make_unique<Pattern>();
    int error = 0;
    PCRE2_SIZE offset = 0;
    p->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                            PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_MULTILINE,
                            &error, &offset, context.get());
    if (p->code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      fail("pre-tokenizer pattern '", source, "' does not compile at offset ", offset, ": ",
           reinterpret_cast<const char*>(message));
    }
    // Without JIT (unsupported CPU) the interpreter gives the same splits, only slower.
    p->jit = pcre2_jit_compile(p->code, PCRE2_JIT_COMPLETE) == 0;
    patterns_.push_back(std::move(p));
  }
}

PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  if (text.empty()) return;
  // Match data holds no pattern state, so one per thread serves every pattern and tokenizer.
  thread_local std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
      pcre2_match_data_create(1, nullptr));
  PAGODA_CHECK(md != nullptr);
  if (patterns_.empty()) {
    out.push_back(text);
    return;
  }
  if (patterns_.size() == 1) {
    patterns_[0]->split(text, md.get(), out);
    return;
  }
  std::vector<std::string_view> current{text}, next;
  for (size_t i = 0; i + 1 < patterns_.size(); ++i) {
    next.clear();
    for (std::string_view piece : current) patterns_[i]->split(piece, md.get(), next);
    current.swap(next);
  }
  for (std::string_view piece : current) patterns_.back()->split(piece, md.get(), out);
}

}  // namespace pagoda
