// The disk tier options `run` and `serve` share (--kv-disk DIR, --kv-disk-gb G), and the
// identity that keeps one model's K/V blocks apart from another's in the folder.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "engine/engine.h"
#include "model/model_file.h"

namespace pagoda::cli {

struct KvDiskOptions {
  std::string folder;  // empty: no disk tier
  double gb = 8.0;
  CLI::Option* gb_option = nullptr;
  std::string save_dir;  // serve --kv-save-dir: saved prefixes (empty: none)
  double offload_gb = 0;  // --kv-offload-gb: the host-memory tier (0: none)
};

// Adds --kv-disk, --kv-disk-gb and --kv-offload-gb to `cmd`.
void add_kv_disk_options(CLI::App* cmd, KvDiskOptions& options);

// Before the model loads: throws Error in one line when --kv-disk is given with a backend other
// than the CPU, --kv-offload-gb with the CUDA backend, or either tier with several ranks; UsageError for --kv-disk-gb without
// --kv-disk.
void check_kv_disk_options(const KvDiskOptions& options, const std::string& backend);

// Sets config.kv_offload_bytes, and config.kv_disk for the model `file` under config's K/V type
// and block size and `context` tokens (nothing without --kv-disk). `also` names anything else
// that changes the K/V of every request (run's --lora adapter: its digest and scale); a
// request's own adapter is in its cache key, which the disk tier's prefix digests include.
void apply_kv_disk_options(const KvDiskOptions& options, const ModelFile& file, int32_t context,
                           EngineConfig& config, const std::string& also = "");

// serve's --kv-save-dir DIR: the folder of /v1/kv/save and /v1/kv/restore.
void add_kv_save_option(CLI::App* cmd, KvDiskOptions& options);

// With --kv-save-dir: creates the folder and returns the identity saved prefixes of this model
// file and config carry (the disk tier's); empty without the option. Throws Error in one line
// when the folder cannot be made, or the engine cannot move prefixes in and out (`backend` not
// the CPU, no prefix cache, a draft model).
std::string kv_save_identity(const KvDiskOptions& options, const ModelFile& file,
                             const EngineConfig& config, const std::string& backend);

// What names the K/V one model file computes under these settings: a digest of the file (a
// GGUF file's header, metadata and tensor table as bytes; every tensor's name, type, shape and
// four 4 KiB pages of its data; never the whole file), the model's RoPE settings, and the K/V
// type, block size and context.
std::string kv_disk_identity(const ModelFile& file, KvType kv_type, int32_t block_size,
                             int32_t context);

}  // namespace pagoda::cli
