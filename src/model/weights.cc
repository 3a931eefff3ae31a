#include "model/weights.h"

#include <cstring>

#include "core/mapped_file.h"
#include "core/error.h"
#include "quant/reference.h"

namespace pagoda {

namespace {

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string gguf_tensor_name(const std::string& hf_name, const Architecture* arch) {
  std::string hf = hf_name;
  if (arch != nullptr) {
    for (std::string_view p : arch->hf_ignored_prefixes) {
      if (starts_with(hf, p)) return "";
    }
    for (const auto& [wrapped, plain] : arch->hf_text_prefixes) {
      if (starts_with(hf, wrapped)) {
        hf = std::string(plain) + hf.substr(wrapped.size());
        break;
      }
    }
  }
  static const std::vector<std::pair<std::string, std::string>> kTop = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
  };
  if (arch != nullptr) {
    for (const auto& [from, to] : arch->hf_top_names) {
      if (hf == from) return std::string(to);
    }
  }
  for (const auto& [from, to] : kTop) {
    if (hf == from) return to;
  }
  static const std::vector<std::pair<std::string_view, std::string_view>> kLayer = {
      {"input_layernorm", "attn_norm"},         {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"},           {"self_attn.v_proj", "attn_v"},
      {"self_attn.o_proj", "attn_output"},      {"self_attn.q_norm", "attn_q_norm"},
      {"self_attn.k_norm", "attn_k_norm"},      {"post_attention_layernorm", "ffn_norm"},
      {"mlp.gate_proj", "ffn_gate"},            {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"},          {"self_attn.qkv_proj", "attn_qkv"},
      {"mlp.gate_up_proj", "ffn_up"},
  };
  const std::string prefix(arch != nullptr ? arch->hf_layer_prefix : "model.layers.");
  if (!starts_with(hf, prefix)) return hf_name;
  size_t dot = hf.find('.', prefix.size());
  if (dot == std::string::npos) return hf_name;
  std::string layer = hf.substr(prefix.size(), dot - prefix.size());
  std::string rest = hf.substr(dot + 1);
  auto map = [&](const std::vector<std::pair<std::string_view, std::string_view>>& table,
                 std::string& out) {
    for (const auto& [from, to] : table) {
      if (starts_with(rest, from) && rest.size() > from.size() && rest[from.size()] == '.') {
        out = "blk." + layer + "." + std::string(to) + rest.substr(from.size());
        return true;
      }
    }
    return false;
  };
  std::string out;
  if (arch != nullptr && map(arch->hf_layer_names, out)) return out;
  if (map(kLayer, out)) return out;
  return hf_name;
}

TensorLookup::TensorLookup(const ModelFile& file) : source_(file.path()) {
  const Architecture* arch = find_architecture(file.config().architecture);
  if (file.gguf() == nullptr && arch != nullptr) norm_offset_ = arch->hf_norm_offset;
  for (const TensorRef& t : file.tensors()) {
    std::string name = gguf_tensor_name(t.name, arch);
    if (!name.empty()) by_name_.emplace(std::move(name), &t);
  }
}

bool TensorLookup::has(const std::string& name) const { return by_name_.count(name) != 0; }

const TensorRef& TensorLookup::get(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) fail(source_, ": tensor '", name, "' is missing");
  return *it->second;
}

DType TensorLookup::type(const std::string& name) const { return get(name).type; }

void TensorLookup::count(const uint8_t* data, uint64_t bytes) const {
  if (counted_[data]) return;
  counted_[data] = true;
  bytes_used_ += bytes;
}

WeightMatrix TensorLookup::matrix(const std::string& name, int64_t rows, int64_t cols) const {
  return matrix_rows(name, 0, rows, rows, cols);
}

WeightMatrix TensorLookup::matrix_rows(const std::string& name, int64_t first, int64_t rows,
                                       int64_t total_rows, int64_t cols) const {
  const WeightMatrix w = view(name, first, rows, total_rows, cols);
  count(w.data, w.row_bytes * static_cast<uint64_t>(rows));
  matrices_.push_back(w);
  return w;
}

WeightMatrix TensorLookup::view(const std::string& name, int64_t first, int64_t rows,
                                int64_t total_rows, int64_t cols) const {
  const TensorRef& t = get(name);
  // A 3-D tensor (stacked experts: [cols, rows, experts]) is rows x experts rows of cols.
  const int64_t stored_rows = t.shape.size() == 2   ? static_cast<int64_t>(t.shape[1])
                              : t.shape.size() == 3 ? static_cast<int64_t>(t.shape[1] * t.shape[2])
                                                    : -1;
  if (first < 0 || rows < 0 || first + rows > total_rows) {
    fail(source_, ": rows ", first, " .. ", first + rows, " of tensor '", name, "' past its ",
         total_rows, " rows");
  }
  if (stored_rows != total_rows || static_cast<int64_t>(t.shape[0]) != cols) {
    std::string have;
    for (uint64_t d : t.shape) have += (have.empty() ? "" : " x ") + std::to_string(d);
    fail(source_, ": tensor '", name, "' has shape ", have, ", expected ", cols, " x ", total_rows);
  }
  WeightMatrix w;
  w.type = t.type;
  w.rows = rows;
  w.cols = cols;
  w.row_bytes = t.num_bytes / static_cast<uint64_t>(total_rows);
  w.data = t.data + static_cast<uint64_t>(first) * w.row_bytes;
  w.id = new_weight_id();
  w.mapped = true;  // TensorRef::data points into the ModelFile's mapping
  return w;
}

WeightMatrix TensorLookup::matrix_cols(const std::string& name, int64_t rows, int64_t total_cols,
                                       int64_t first, int64_t cols,
                                       std::vector<uint8_t>& storage) const {
  const WeightMatrix whole = view(name, 0, rows, rows, total_cols);
  const DTypeTraits& t = dtype_traits(whole.type);
  if (first < 0 || cols <= 0 || first + cols > total_cols || first % t.block_size != 0 ||
      cols % t.block_size != 0) {
    fail(source_, ": columns ", first, " .. ", first + cols, " of tensor '", name, "' (", t.name,
         ", blocks of ", t.block_size, ") do not fall on whole blocks of its ", total_cols);
  }
  const uint64_t offset = static_cast<uint64_t>(first / t.block_size) * t.type_size;
  const uint64_t row_bytes = static_cast<uint64_t>(cols / t.block_size) * t.type_size;
  storage.resize(row_bytes * static_cast<uint64_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(storage.data() + static_cast<uint64_t>(r) * row_bytes,
                whole.data + static_cast<uint64_t>(r) * whole.row_bytes + offset, row_bytes);
  }
  // The whole matrix was read once to copy the slice; its pages need not stay.
  release_mapped_pages(whole.data, static_cast<size_t>(whole.row_bytes * rows));
  WeightMatrix w = whole;
  w.cols = cols;
  w.row_bytes = row_bytes;
  w.data = storage.data();
  w.id = new_weight_id();
  w.mapped = false;
  count(w.data, storage.size());
  matrices_.push_back(w);
  return w;
}

std::vector<WeightMatrix> TensorLookup::matrices_except(uint64_t skip_id) const {
  std::vector<WeightMatrix> out;
  for (const WeightMatrix& m : matrices_) {
    if (skip_id == 0 || m.id != skip_id) out.push_back(m);
  }
  return out;
}

std::vector<float> TensorLookup::vector(const std::string& name, int64_t size) const {
  const TensorRef& t = get(name);
  count(t.data, t.num_bytes);
  if (static_cast<int64_t>(t.num_elements) != size) {
    fail(source_, ": tensor '", name, "' has ", t.num_elements, " elements, expected ", size);
  }
  std::vector<float> out(static_cast<size_t>(size));
  dequantize_row(t.type, t.data, out.data(), size);
  if (norm_offset_ != 0 && ends_with(name, "norm.weight")) {
    for (float& x : out) x += norm_offset_;
  }
  return out;
}

}  // namespace pagoda
