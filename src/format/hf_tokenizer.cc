#include "format/hf_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "core/error.h"
#include "tokenizer/pre_tokenizer.h"

namespace pagoda {
namespace {

using nlohmann::json;

const std::string kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

const char* json_kind(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a bool";
  if (v.is_number_float()) return "a float";
  if (v.is_number()) return "an integer";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

// Typed access to one JSON object; every error names the source and the key's full path.
class Obj {
 public:
  Obj(const json& v, std::string path, const std::string& source)
      : v_(v), path_(std::move(path)), source_(source) {
    if (!v_.is_object())
      fail(source_, ": ", where(), " is ", json_kind(v_), ", expected an object");
  }

  // nullptr when the key is absent or null (tokenizer.json writes null for "not set").
  const json* get(const char* key) const {
    auto it = v_.find(key);
    return it == v_.end() || it->is_null() ? nullptr : &*it;
  }
  const json& require(const char* key) const {
    const json* v = get(key);
    if (v == nullptr) fail(source_, ": key '", path(key), "' is missing");
    return *v;
  }
  Obj obj(const char* key) const { return Obj(require(key), path(key), source_); }
  const json& array(const char* key) const {
    const json& v = require(key);
    if (!v.is_array()) type_error(key, v, "an array");
    return v;
  }
  std::optional<std::string> str(const char* key) const {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) type_error(key, *v, "a string");
    return v->get<std::string>();
  }
  std::optional<bool> boolean(const char* key) const {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) type_error(key, *v, "a bool");
    return v->get<bool>();
  }
  std::optional<TokenId> id(const char* key) const {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > INT32_MAX) {
      type_error(key, *v, "a token id");
    }
    return static_cast<TokenId>(v->get<int64_t>());
  }

  std::string path(const char* key) const { return path_.empty() ? key : path_ + "." + key; }
  const json& value() const { return v_; }
  const std::string& source() const { return source_; }
  [[noreturn]] void type_error(const char* key, const json& v, const char* want) const {
    fail(source_, ": key '", path(key), "' is ", json_kind(v), ", expected ", want);
  }

 private:
  std::string where() const { return path_.empty() ? "the top level" : "key '" + path_ + "'"; }
  const json& v_;
  std::string path_;
  const std::string& source_;
};

// A normalizer / pre-tokenizer / post-processor is one object or a Sequence of them (nested
// Sequences are flattened). `list_key` is the Sequence's member ("normalizers", ...).
void flatten(const json& v, const char* list_key, std::vector<const json*>& out, int depth = 0) {
  if (!v.is_object() || depth > 8) return;
  auto type = v.find("type");
  auto list = v.find(list_key);
  if (type != v.end() && *type == "Sequence" && list != v.end() && list->is_array()) {
    for (const json& item : *list) flatten(item, list_key, out, depth + 1);
  } else {
    out.push_back(&v);
  }
}

std::vector<const json*> components(const Obj& root, const char* key, const char* list_key) {
  std::vector<const json*> out;
  if (const json* v = root.get(key)) flatten(*v, list_key, out);
  return out;
}

std::string type_of(const json& v) {
  auto t = v.find("type");
  return t != v.end() && t->is_string() ? t->get<std::string>() : "";
}

std::string string_member(const json& v, const char* key) {
  auto it = v.find(key);
  return it != v.end() && it->is_string() ? it->get<std::string>() : "";
}

// {"String": " "} or {"Regex": "..."}: the pattern text, whichever form.
std::string pattern_text(const json& v) {
  auto it = v.find("pattern");
  if (it == v.end() || !it->is_object()) return "";
  std::string s = string_member(*it, "String");
  return s.empty() ? string_member(*it, "Regex") : s;
}

bool is_byte_token(const std::string& s) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return s.size() == 6 && s.compare(0, 3, "<0x") == 0 && hex(s[3]) && hex(s[4]) && s[5] == '>';
}

// How the tokenizer.json turns text into pieces before BPE, reduced to what Vocab can express.
struct Style {
  bool spm = false;            // "▁" stands for a space
  bool prepend_space = false;  // a "▁" is put before the text
  bool byte_level = false;     // GPT-2 byte-to-unicode mapping
  // The byte-level pre-tokenizer's splitting steps as regexes, in order; `exotic` is set when
  // a step has no regex form here (an inverted or non-Isolated Split, a literal pattern).
  std::vector<std::string> patterns;
  bool exotic = false;
};

Style read_style(const Obj& root) {
  Style st;
  for (const json* n : components(root, "normalizer", "normalizers")) {
    std::string t = type_of(*n);
    if (t == "Prepend" && string_member(*n, "prepend") == kSpaceMark) {
      st.spm = st.prepend_space = true;
    } else if (t == "Replace" && pattern_text(*n) == " " &&
               string_member(*n, "content") == kSpaceMark) {
      st.spm = true;
    }
  }
  for (const json* p : components(root, "pre_tokenizer", "pretokenizers")) {
    std::string t = type_of(*p);
    if (t == "Metaspace") {
      st.spm = true;
      // Older files say add_prefix_space; newer ones prepend_scheme ("always", "first", "never").
      auto scheme = p->find("prepend_scheme");
      auto add = p->find("add_prefix_space");
      if (scheme != p->end() && scheme->is_string()) {
        st.prepend_space = *scheme != "never";
      } else if (add != p->end() && add->is_boolean()) {
        st.prepend_space = add->get<bool>();
      } else {
        st.prepend_space = true;  // the default of both forms
      }
    } else if (t == "ByteLevel") {
      st.byte_level = true;
      auto use_regex = p->find("use_regex");
      if (use_regex == p->end() || !use_regex->is_boolean() || use_regex->get<bool>()) {
        st.patterns.push_back(pre_tokenizer_spec("gpt-2").patterns.at(0));  // ByteLevel's own
      }
    } else if (t == "Split") {
      auto pattern = p->find("pattern");
      auto invert = p->find("invert");
      bool plain = pattern != p->end() && pattern->is_object() && pattern->contains("Regex") &&
                   string_member(*p, "behavior") == "Isolated" &&
                   (invert == p->end() || *invert == false);
      if (plain) {
        st.patterns.push_back(string_member(*pattern, "Regex"));
      } else {
        st.exotic = true;
      }
    } else if (t == "Digits") {
      auto single = p->find("individual_digits");
      bool individual = single != p->end() && single->is_boolean() && single->get<bool>();
      st.patterns.push_back(individual ? "\\p{N}" : "\\p{N}+");
    } else if (!t.empty()) {  // Whitespace, Punctuation, ...: no regex form here
      st.exotic = true;
    }
  }
  return st;
}

// The tokenizer.ggml.pre name whose splitting steps are exactly these regexes (and whose
// ignore_merges agrees, when one does); "default" (GPT-2's split) when none matches.
std::string guess_pre(const Style& st, bool ignore_merges) {
  if (st.exotic) return "default";
  // The usual name of each family first; any other name of the same family means the same.
  std::vector<std::string> names = {"gpt-2",       "llama-bpe", "qwen2", "starcoder",
                                    "deepseek-v3", "gpt-4o",    "tekken"};
  for (std::string& n : pre_tokenizer_names()) names.push_back(std::move(n));
  for (bool need_same_ignore : {true, false}) {
    for (const std::string& name : names) {
      const PreTokenizerSpec& spec = pre_tokenizer_spec(name);
      if (spec.patterns == st.patterns &&
          (!need_same_ignore || spec.ignore_merges == ignore_merges)) {
        return name;
      }
    }
  }
  return "default";
}

// model.vocab (text -> id) must number its tokens 0..n-1 with no gaps; added_tokens may extend
// the list past n, again without gaps, or restate a token already there.
struct AddedToken {
  TokenId id;
  bool special;
};

std::vector<AddedToken> read_tokens(const Obj& root, const Obj& model, Vocab& v) {
  const std::string& source = root.source();
  const Obj vocab = model.obj("vocab");
  const size_t n = vocab.value().size();
  v.tokens.assign(n, std::string());
  std::vector<bool> seen(n, false);
  for (const auto& [text, idv] : vocab.value().items()) {
    if (!idv.is_number_integer() || idv.get<int64_t>() < 0) {
      vocab.type_error(text.c_str(), idv, "a non-negative token id");
    }
    auto id = static_cast<uint64_t>(idv.get<int64_t>());
    if (id >= n) {
      fail(source, ": key '", vocab.path(text.c_str()), "': id ", id, " is outside 0..", n - 1,
           " (the ids of model.vocab must be dense)");
    }
    if (seen[id]) fail(source, ": key '", vocab.path(text.c_str()), "': id ", id, " is used twice");
    seen[id] = true;
    v.tokens[id] = text;
  }

  std::vector<AddedToken> added;
  std::vector<std::pair<TokenId, std::string>> extra;  // past the end of model.vocab
  if (root.get("added_tokens") != nullptr) {
    const json& list = root.array("added_tokens");
    for (size_t k = 0; k < list.size(); ++k) {
      Obj a(list[k], str_cat("added_tokens[", k, "]"), source);
      auto id_opt = a.id("id");
      if (!id_opt) fail(source, ": key '", a.path("id"), "' is missing");
      TokenId id = *id_opt;
      std::string content = a.str("content").value_or("");
      if (content.empty()) fail(source, ": key '", a.path("content"), "' is missing or empty");
      bool special = a.boolean("special").value_or(false);
      if (static_cast<size_t>(id) < n) {
        if (v.tokens[id] != content) {
          fail(source, ": key '", a.path("content"), "': added token '", content, "' has id ", id,
               ", which model.vocab gives to '", v.tokens[id], "'");
        }
      } else {
        extra.emplace_back(id, content);
      }
      added.push_back({id, special});
    }
  }
  // Sorted, the extra ids must be exactly n, n+1, ...: that also bounds the resize below.
  std::sort(extra.begin(), extra.end());
  for (size_t k = 0; k < extra.size(); ++k) {
    if (static_cast<size_t>(extra[k].first) != n + k) {
      fail(source, ": added token '", extra[k].second, "' has id ", extra[k].first, " but id ",
           n + k, " is the next free one (token ids must be dense)");
    }
    v.tokens.push_back(extra[k].second);
  }
  return added;
}

// TemplateProcessing: a SpecialToken before the first Sequence is BOS, one after the last is EOS.
void read_post_processor(const Obj& root, Vocab& v) {
  for (const json* p : components(root, "post_processor", "processors")) {
    if (type_of(*p) != "TemplateProcessing") continue;
    Obj proc(*p, "post_processor", root.source());
    const json& single = proc.array("single");
    auto special_id = [&](const json& item) -> TokenId {
      auto st = item.find("SpecialToken");
      if (st == item.end() || !st->is_object()) return kNoToken;
      std::string name = string_member(*st, "id");
      // special_tokens maps the template's name to ids; the name itself is usually the text.
      if (const json* map = proc.get("special_tokens"); map != nullptr && map->is_object()) {
        auto e = map->find(name);
        if (e != map->end() && e->is_object()) {
          auto ids = e->find("ids");
          if (ids != e->end() && ids->is_array() && ids->size() == 1 &&
              (*ids)[0].is_number_integer()) {
            int64_t id = (*ids)[0].get<int64_t>();
            if (id >= 0 && id <= INT32_MAX) return static_cast<TokenId>(id);
          }
        }
      }
      return v.find(name);
    };
    bool seen_sequence = false;
    for (const json& item : single) {
      if (!item.is_object()) continue;
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      TokenId id = special_id(item);
      if (id == kNoToken) continue;
      if (!seen_sequence && !v.add_bos) {
        v.bos = id;
        v.add_bos = true;
      } else if (seen_sequence) {
        v.eos = id;
        v.add_eos = true;
      }
    }
  }
}

void read_merges(const Obj& model, Vocab& v) {
  const std::string& source = model.source();
  const json* list = model.get("merges");
  if (list == nullptr) return;
  if (!list->is_array()) model.type_error("merges", *list, "an array");
  v.merges.reserve(list->size());
  for (size_t k = 0; k < list->size(); ++k) {
    const json& m = (*list)[k];
    std::string where = str_cat(source, ": key 'model.merges[", k, "]'");
    std::string a, b;
    if (m.is_string()) {  // "a b": the older form; tokens never hold a plain space here
      const std::string& s = m.get_ref<const std::string&>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() ||
          s.find(' ', sp + 1) != std::string::npos) {
        fail(where, ": merge '", s, "' is not two tokens separated by one space");
      }
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      fail(where, " is ", json_kind(m), ", expected \"a b\" or [\"a\", \"b\"]");
    }
    // The HF tokenizer refuses such files too; checking here keeps the BPE loop free of misses.
    for (const std::string* t : {&a, &b}) {
      if (v.find(*t) == kNoToken) fail(where, ": '", *t, "' is not in the vocabulary");
    }
    if (v.find(a + b) == kNoToken)
      fail(where, ": the merged token '", a + b, "' is not in the vocabulary");
    v.merges.emplace_back(std::move(a), std::move(b));
  }
}

// Ids a tokenizer.json without a template often still names; used only when nothing else did.
TokenId find_special(const Vocab& v, std::initializer_list<const char*> texts) {
  for (const char* t : texts) {
    TokenId id = v.find(t);
    if (id != kNoToken && v.types[id] == TokenType::kControl) return id;
  }
  return kNoToken;
}

// BERT's WordPiece, stored as llama.cpp's converter stores it (tokenizer.ggml.model "bert"):
// a word-initial piece "x" becomes "\u2581x", a continuation "##x" plain "x", special tokens
// keep their text. pagoda's WordPiece tokenizer reads that form, lower-casing and stripping
// accents as BertNormalizer does with lowercase set; a cased normalizer is refused.
Vocab wordpiece_vocab(const Obj& root, const Obj& model) {
  const std::string& source = root.source();
  if (auto prefix = model.str("continuing_subword_prefix"); prefix && *prefix != "##") {
    fail(source, ": key 'model.continuing_subword_prefix' is '", *prefix, "'; only '##' is supported");
  }
  for (const json* n : components(root, "normalizer", "normalizers")) {
    if (type_of(*n) != "BertNormalizer") {
      fail(source, ": a WordPiece tokenizer with normalizer '", type_of(*n),
           "': only BertNormalizer is supported");
    }
    auto lower = n->find("lowercase");
    if (lower != n->end() && lower->is_boolean() && !lower->get<bool>()) {
      fail(source, ": key 'normalizer.lowercase' is false; pagoda's WordPiece is BERT's uncased one");
    }
  }
  Vocab v;
  v.kind = TokenizerKind::kWordPiece;
  v.model = "bert";
  v.pre = "default";
  v.add_space_prefix = false;
  std::vector<AddedToken> added = read_tokens(root, model, v);
  v.types.assign(v.tokens.size(), TokenType::kNormal);
  for (const AddedToken& a : added) {
    v.types[a.id] = a.special ? TokenType::kControl : TokenType::kUserDefined;
  }
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.types[i] == TokenType::kControl) continue;
    std::string& t = v.tokens[i];
    t = t.compare(0, 2, "##") == 0 ? t.substr(2) : kSpaceMark + t;
  }
  v.build_index(source);
  if (auto unk = model.str("unk_token")) {
    v.unk = v.find(*unk);
    if (v.unk == kNoToken)
      fail(source, ": key 'model.unk_token' names '", *unk, "', not in the vocabulary");
    v.types[v.unk] = TokenType::kUnknown;
  }
  read_post_processor(root, v);
  v.cls = v.add_bos ? v.bos : v.find("[CLS]");
  v.sep = v.add_eos ? v.eos : v.find("[SEP]");
  v.pad = v.find("[PAD]");
  v.mask = v.find("[MASK]");
  v.build_index(source);
  return v;
}

}  // namespace

json parse_json(std::string_view text, const std::string& source, int max_depth) {
  // The DOM parser allocates a node per bracket, so bound nesting before it runs.
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) fail(source, ": JSON nested deeper than ", max_depth, " levels");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    std::string what = e.what();  // "[json.exception.parse_error.101] parse error at ..."
    size_t cut = what.find("] ");
    if (cut != std::string::npos && what[0] == '[') what = what.substr(cut + 2);
    fail(source, ": invalid JSON: ", what);
  }
}

Vocab vocab_from_hf_tokenizer_json(const std::string& json_text, const std::string& source) {
  const json doc = parse_json(json_text, source);
  const Obj root(doc, "", source);
  const Obj model = root.obj("model");
  // Old files leave out model.type; a merges list then says BPE.
  std::string type = model.str("type").value_or(model.get("merges") ? "BPE" : "");
  if (type == "WordPiece") return wordpiece_vocab(root, model);
  if (type != "BPE") {
    fail(source, ": tokenizer model type '", type,
         "' is not supported yet (BPE: SentencePiece-style or byte-level; WordPiece)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (auto s = model.str(key); s && !s->empty()) {
      fail(source, ": key 'model.", key, "' (\"", *s, "\") is not supported yet");
    }
  }

  Vocab v;
  const Style st = read_style(root);
  if (st.byte_level) {
    v.kind = TokenizerKind::kBpe;
    v.model = "gpt2";
    v.pre = guess_pre(st, model.boolean("ignore_merges").value_or(false));
    v.add_space_prefix = false;
  } else if (st.spm) {
    v.kind = TokenizerKind::kSpm;
    v.model = "llama";
    v.pre = "default";
    v.add_space_prefix = st.prepend_space;
  } else {
    fail(source,
         ": a BPE tokenizer with neither a ByteLevel pre-tokenizer nor SentencePiece-style "
         "\"\u2581\" spaces is not supported yet");
  }

  std::vector<AddedToken> added = read_tokens(root, model, v);
  v.types.assign(v.tokens.size(), TokenType::kNormal);
  if (v.kind == TokenizerKind::kSpm) {
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      if (is_byte_token(v.tokens[i])) v.types[i] = TokenType::kByte;
    }
  }
  for (const AddedToken& a : added) {
    v.types[a.id] = a.special ? TokenType::kControl : TokenType::kUserDefined;
  }
  v.build_index(source);  // find() from here on

  if (auto unk = model.str("unk_token")) {
    v.unk = v.find(*unk);
    if (v.unk == kNoToken)
      fail(source, ": key 'model.unk_token' names '", *unk, "', not in the vocabulary");
    v.types[v.unk] = TokenType::kUnknown;
  }
  read_merges(model, v);
  read_post_processor(root, v);
  if (v.bos == kNoToken) v.bos = find_special(v, {"<s>", "<|begin_of_text|>", "<bos>"});
  if (v.eos == kNoToken) {
    v.eos = find_special(v, {"</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>"});
  }
  v.build_index(source);
  return v;
}

}  // namespace pagoda
