#include "cli/kv_disk_options.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "cli/commands.h"
#include "cli/ranks.h"
#include "core/error.h"
#include "format/gguf.h"

namespace pagoda::cli {
namespace {

constexpr uint64_t kPageBytes = 4096;

// A 64-bit hash that takes bytes piece by piece: multiply-rotate over 8-byte lanes.
class Digest {
 public:
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; i += 8) {
      uint64_t v = 0;
      std::memcpy(&v, p + i, std::min<size_t>(8, n - i));
      h_ = std::rotl((h_ ^ v) * 0x87c37b91114253d5ULL, 29) * 0x4cf5ad432745937fULL;
    }
    h_ ^= n * 0x9e3779b97f4a7c15ULL;
  }
  void add(const std::string& s) { add(s.data(), s.size()); }
  template <typename T>
  void add_value(const T& v) {
    add(&v, sizeof v);
  }
  std::string hex() const {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h_));
    return buf;
  }

 private:
  uint64_t h_ = 0x243f6a8885a308d3ULL;
};

// A GGUF file's bytes before its tensor data: header, metadata and tensor table.
void add_gguf_head(Digest& d, const ModelFile& file) {
  const uint64_t n = file.gguf()->data_offset();
  FILE* f = std::fopen(file.path().c_str(), "rb");
  if (f == nullptr) fail("--kv-disk: cannot read ", file.path());
  std::vector<uint8_t> buf(1 << 20);
  for (uint64_t done = 0; done < n;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), n - done));
    const size_t got = std::fread(buf.data(), 1, want, f);
    if (got == 0) break;
    d.add(buf.data(), got);
    done += got;
  }
  std::fclose(f);
  d.add_value(file.gguf()->file_size());
}

// Every tensor's name, type and shape, and four pages of its data (first, two inside, last).
void add_tensors(Digest& d, const ModelFile& file) {
  for (const TensorRef& t : file.tensors()) {
    d.add(t.name);
    d.add_value(static_cast<int>(t.type));
    d.add(t.shape.data(), t.shape.size() * sizeof(uint64_t));
    d.add_value(t.num_bytes);
    if (t.data == nullptr || t.num_bytes == 0) continue;
    const uint64_t page = std::min(kPageBytes, t.num_bytes);
    const uint64_t last = t.num_bytes - page;
    for (const uint64_t at : {uint64_t{0}, last / 3, 2 * (last / 3), last}) {
      d.add(t.data + at, page);
    }
  }
}

}  // namespace

void add_kv_disk_options(CLI::App* cmd, KvDiskOptions& o) {
  cmd->add_option("--kv-disk", o.folder,
                  "Keep full KV blocks of the prefix cache in this folder too (written behind the "
                  "step), found again after eviction and restarts (one process per folder)");
  o.gb_option = cmd->add_option("--kv-disk-gb", o.gb,
                                "GiB the --kv-disk folder may hold for this model (least "
                                "recently used blocks go first)")
                    ->capture_default_str()
                    ->check(CLI::Range(0.001, 1e6));
  cmd->add_option("--kv-offload-gb", o.offload_gb,
                  "Keep KV blocks evicted from the KV cache in this many GiB of host memory, "
                  "found again by the prefix cache (least recently used go first, down to "
                  "--kv-disk when given)")
      ->check(CLI::Range(0.0, 1e6));
}

void add_kv_save_option(CLI::App* cmd, KvDiskOptions& o) {
  cmd->add_option("--kv-save-dir", o.save_dir,
                  "Answer POST /v1/kv/save and /v1/kv/restore: prompt prefixes' KV blocks saved "
                  "to and restored from named files in this folder");
}

std::string kv_save_identity(const KvDiskOptions& o, const ModelFile& file,
                             const EngineConfig& config, const std::string& backend) {
  if (o.save_dir.empty()) return "";
  if (backend != "cpu") fail("--kv-save-dir: the ", backend, " backend does not save KV (the CPU backend does)");
  if (!config.enable_prefix_caching) fail("--kv-save-dir needs the prefix cache (--no-prefix-caching is given)");
  if (config.speculative.draft_model != nullptr) {
    fail("--kv-save-dir does not go with a draft model (the draft's K/V would not be saved)");
  }
  std::error_code ec;
  std::filesystem::create_directories(o.save_dir, ec);
  if (ec || !std::filesystem::is_directory(o.save_dir)) {
    fail("--kv-save-dir ", o.save_dir, ": cannot create the folder (", ec.message(), ")");
  }
  return kv_disk_identity(file, config.kv_type, config.block_size, config.max_model_len);
}

std::string kv_disk_identity(const ModelFile& file, KvType kv_type, int32_t block_size,
                             int32_t context) {
  Digest d;
  d.add(file.format());
  if (file.gguf() != nullptr) add_gguf_head(d, file);
  add_tensors(d, file);
  const ModelConfig& c = file.config();
  std::ostringstream out;
  out << "pagoda-kv 1 model " << d.hex() << " " << c.architecture << " layers " << c.num_layers
      << " kv-heads " << c.num_kv_heads << " head-dim " << c.head_dim << " rope " << c.rope_theta
      << " " << c.rotary_dim << " " << c.rope_scaling_type << " " << c.rope_scaling_factor << " "
      << c.rope_low_freq_factor << " " << c.rope_high_freq_factor << " "
      << c.rope_original_context << " " << c.rope_yarn_beta_fast << " " << c.rope_yarn_beta_slow
      << " " << c.rope_yarn_attn_factor << " " << c.rope_attn_factor << " kv-type "
      << kv_type_info(kv_type).name << " block " << block_size << " context " << context;
  return out.str();
}

void check_kv_disk_options(const KvDiskOptions& o, const std::string& backend) {
  if (o.offload_gb > 0 && ranks() != nullptr) {
    fail("--kv-offload-gb: not with tensor parallel ranks");
  }
  // Its copies go through the backend's download and upload, which have not run on a device yet.
  if (o.offload_gb > 0 && backend == "cuda") {
    fail("--kv-offload-gb: the cuda backend does not take a host-memory tier yet (its copies to "
         "and from the device have not run on one; the CPU backend does)");
  }
  if (o.folder.empty()) {
    if (o.gb_option != nullptr && o.gb_option->count() > 0) {
      throw UsageError("--kv-disk-gb goes with --kv-disk DIR");
    }
    return;
  }
  if (backend != "cpu") {
    fail("--kv-disk: the ", backend,
         " backend does not take a disk tier yet (the CPU backend does)");
  }
  if (ranks() != nullptr) fail("--kv-disk: not with tensor parallel ranks");
}

void apply_kv_disk_options(const KvDiskOptions& o, const ModelFile& file, int32_t context,
                           EngineConfig& config, const std::string& also) {
  config.kv_offload_bytes = static_cast<uint64_t>(o.offload_gb * double(uint64_t{1} << 30));
  if (o.folder.empty()) return;
  config.kv_disk.folder = o.folder;
  config.kv_disk.max_bytes = static_cast<uint64_t>(o.gb * double(uint64_t{1} << 30));
  config.kv_disk.identity = kv_disk_identity(file, config.kv_type, config.block_size, context);
  if (!also.empty()) config.kv_disk.identity += " " + also;
}

}  // namespace pagoda::cli
