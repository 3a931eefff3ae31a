#include "model/model_check.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace pagoda {
namespace {

void check_config(const ModelConfig& c, std::vector<std::string>& out) {
  auto need = [&](uint64_t value, const char* what) {
    if (value == 0) out.push_back(str_cat(what, " is 0 or missing"));
  };
  if (c.architecture.empty()) out.push_back("the architecture is missing");
  need(c.hidden_size, "the hidden size");
  need(c.num_heads, "the attention head count");
  need(c.num_kv_heads, "the KV head count");
  need(c.head_dim, "the head size");
  need(c.context_length, "the context length");
  if (c.num_heads != 0 && c.num_kv_heads != 0 && c.num_heads % c.num_kv_heads != 0) {
    out.push_back(str_cat(c.num_heads, " attention heads are not a multiple of ", c.num_kv_heads,
                          " KV heads"));
  }
  if (c.rotary_dim > c.head_dim) {
    out.push_back(str_cat("RoPE covers ", c.rotary_dim, " dimensions of a head of ", c.head_dim));
  }
  if (!(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps > 0)) {
    out.push_back(str_cat("the norm epsilon ", c.rms_norm_eps, " is not a positive number"));
  }
  if (!(std::isfinite(c.rope_theta) && c.rope_theta > 0)) {
    out.push_back(str_cat("the RoPE base ", c.rope_theta, " is not a positive number"));
  }
  if (std::string rope = rope_scaling_problem(c); !rope.empty()) out.push_back(rope);
  if (!(std::isfinite(c.rope_scaling_factor) && c.rope_scaling_factor >= 0)) {
    out.push_back(
        str_cat("the RoPE scaling factor ", c.rope_scaling_factor, " is not a number >= 0"));
  }
}

// Two tensors whose bytes overlap would share weights by accident (or by a crafted file). The
// same bytes under two names with one type and shape are an alias: safetensors ties lm_head to
// the embedding table that way.
void check_overlaps(const std::vector<TensorRef>& tensors, std::vector<std::string>& out) {
  std::vector<const TensorRef*> order;
  for (const TensorRef& t : tensors) {
    if (t.num_bytes > 0 && t.data != nullptr) order.push_back(&t);
  }
  std::sort(order.begin(), order.end(),
            [](const TensorRef* a, const TensorRef* b) { return a->data < b->data; });
  for (size_t i = 1; i < order.size(); ++i) {
    const TensorRef& a = *order[i - 1];
    const TensorRef& b = *order[i];
    const bool alias =
        a.data == b.data && a.num_bytes == b.num_bytes && a.type == b.type && a.shape == b.shape;
    if (a.data + a.num_bytes > b.data && !alias) {
      out.push_back("the data of tensors '" + a.name + "' and '" + b.name + "' overlap");
    }
  }
}

// Rows of the embedding table: every token the tokenizer can produce must have one.
void check_vocab_rows(const ModelFile& file, std::vector<std::string>& out) {
  if (file.vocab_unreadable()) {
    try {
      file.vocab();
    } catch (const Error& e) {
      // The reader's message names the file first; the problem is what follows.
      const std::string what = e.what();
      const size_t colon = what.find(": ");
      out.push_back("the tokenizer cannot be read: " +
                    (colon == std::string::npos ? what : what.substr(colon + 2)));
    }
  }
  if (!file.has_vocab()) return;
  const size_t num_tokens = file.vocab().size();
  for (const char* name : {"token_embd.weight", "model.embed_tokens.weight"}) {
    const TensorRef* t = file.find_tensor(name);
    if (t == nullptr || t->shape.size() != 2) continue;
    if (t->shape[1] < num_tokens) {
      out.push_back(str_cat("the tokenizer has ", num_tokens, " tokens but '", name, "' has only ",
                            t->shape[1], " rows"));
    }
  }
  const uint32_t declared = file.config().vocab_size;
  if (declared != 0 && declared < num_tokens) {
    out.push_back(str_cat("the vocabulary size is set to ", declared, " but the tokenizer has ",
                          num_tokens, " tokens"));
  }
}

}  // namespace

std::vector<std::string> model_problems(const ModelFile& file) {
  std::vector<std::string> out;
  const ModelConfig& c = file.config();
  if (c.num_layers != 0 || !file.tensors().empty()) {
    if (c.num_layers == 0) out.push_back("the layer count is 0 or missing");
    check_config(c, out);
  }
  // A file without weights is a tokenizer: its hyper-parameters are never used.
  if (!file.tensors().empty()) out.insert(out.end(), c.unreadable.begin(), c.unreadable.end());
  check_overlaps(file.tensors(), out);
  check_vocab_rows(file, out);
  return out;
}

void check_model(const ModelFile& file) {
  const std::vector<std::string> problems = model_problems(file);
  if (problems.empty()) return;
  if (problems.size() == 1) fail(file.path(), ": ", problems[0]);
  fail(file.path(), ": ", problems[0], " (and ", problems.size() - 1,
       " more problems: pagoda inspect lists them)");
}

}  // namespace pagoda
