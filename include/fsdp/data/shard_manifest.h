// The manifest.json that `prepare` writes beside its shards, written and read side by side:
// prepare writes it, the trainer and `export` read back what they need.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "fsdp/data/prepare.h"

namespace fsdp::data {

class Tokenizer;

// Writes the manifest of a finished prepare run to `path` (through path.tmp and a rename):
// the tokenizer (null for pre-tokenized inputs: `tok` null), the vocabulary and the
// tokenizer's special ids, the split, the shards of each split, the per-input statistics
// `inputs` and the JSONL line counts.
void write_shard_manifest(const std::filesystem::path& path, const PrepareOptions& o, const Tokenizer* tok,
                          int64_t vocab_size, const PrepareResult& r, const std::vector<nlohmann::json>& inputs);

// What the manifest.json `prepare` writes beside its shards tells a reader: the tokenizer's
// vocabulary size and the tokenizer's path (absolute when prepare could resolve it), and
// each shard's file sizes and CRC-32s (shard_checksums: {"train_00000": {"bin_bytes",
// "bin_crc32", "idx_bytes", "idx_crc32"}, plus "mask_bytes", "mask_crc32" for a shard with a
// loss-mask sidecar (loss_mask.h); absent in manifests written before they existed). SFT runs
// also write "sft": the template, --train-on, the examples by format, truncated and dropped.
struct ShardManifest {
  std::optional<int64_t> vocab_size;
  std::string tokenizer_path;  // "" when not recorded
  std::optional<int64_t> eos_id;  // the tokenizer's EOS id; none when not recorded (-1: it has none)
  std::map<std::string, ShardChecksum> checksums;  // by shard name ("train_00000")
};
// Reads <dir>/manifest.json; nullopt when there is none (shards from Megatron-LM or NeMo
// carry none). A manifest that is not valid JSON throws fsdp::Error naming it.
std::optional<ShardManifest> read_shard_manifest(const std::string& dir);

}  // namespace fsdp::data
