#include "cli/prompt_cache.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "cli/kv_disk_options.h"
#include "core/error.h"
#include "engine/prefix_file.h"

namespace pagoda::cli {

void check_prompt_cache_option(const std::string& path, const std::string& backend,
                               const SpeculativeOptions& speculative) {
  if (path.empty()) return;
  if (backend != "cpu") {
    fail("--prompt-cache: the ", backend, " backend does not save KV (the CPU backend does)");
  }
  if (!speculative.draft_model.empty()) {
    fail("--prompt-cache does not go with a draft model (the draft's K/V would not be saved)");
  }
}

std::string prompt_cache_identity(const ModelFile& file, const EngineConfig& config,
                                  const std::string& also) {
  std::string identity =
      kv_disk_identity(file, config.kv_type, config.block_size, config.max_model_len);
  if (!also.empty()) identity += " " + also;
  return identity;
}

PromptCache::PromptCache(std::string path, Engine& engine, std::string identity)
    : path_(std::move(path)), engine_(engine), identity_(std::move(identity)) {}

void PromptCache::load(const std::vector<TokenId>& prompt) {
  std::error_code ec;
  if (path_.empty() || !std::filesystem::exists(path_, ec)) return;
  try {
    const PrefixBlocks blocks = read_prefix_file(path_, identity_, engine_.config().block_size,
                                                 engine_.kv_block_bytes());
    engine_.import_prefix(blocks);
    const auto n = std::min(blocks.tokens.size(), prompt.size());
    const auto diverge = std::mismatch(prompt.begin(), prompt.begin() + ptrdiff_t(n),
                                       blocks.tokens.begin()).first - prompt.begin();
    const int32_t bs = engine_.config().block_size;
    num_matching_ = static_cast<int32_t>(diverge) / bs * bs;
  } catch (const Error& e) {
    std::fprintf(stderr, "prompt cache %s: a miss, the prompt is computed\n", e.what());
  }
}

void PromptCache::save(const std::vector<TokenId>& prompt) {
  if (path_.empty()) return;
  const int32_t bs = engine_.config().block_size;
  if (static_cast<int32_t>(prompt.size()) / bs * bs <= num_matching_) return;  // nothing new
  const PrefixBlocks blocks = engine_.export_prefix(prompt, 0);
  if (blocks.num_tokens() <= num_matching_) return;
  try {
    write_prefix_file(path_, identity_, blocks);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return;
  }
  std::fprintf(stderr, "prompt cache: saved %d tokens to %s\n", blocks.num_tokens(),
               path_.c_str());
}

std::string cache_summary(const Engine& engine, bool disk, bool prompt_cache, bool host) {
  const KvCacheStats kv = engine.stats().scheduler.kv;
  std::string out;
  if (host) out += str_cat(kv.num_host_tier_hit_tokens, " from host memory");
  if (disk) {
    if (!out.empty()) out += ", ";
    out += str_cat(kv.num_lower_tier_hit_tokens - kv.num_host_tier_hit_tokens,
                   " from the disk cache");
  }
  if (prompt_cache) {
    if (!out.empty()) out += ", ";
    out += str_cat(kv.num_hit_tokens - kv.num_lower_tier_hit_tokens, " from the prompt cache");
  }
  return out.empty() ? out : " (" + out + ")";
}

}  // namespace pagoda::cli
