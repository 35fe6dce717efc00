#include "fsdp/data/shard_manifest.h"

#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "fsdp/core/error.h"
#include "fsdp/core/json_file.h"
#include "fsdp/core/regular_file.h"
#include "fsdp/data/tokenizer.h"

namespace fs = std::filesystem;

namespace fsdp::data {

namespace {

nlohmann::json checksums(const PrepareResult& r) {
  nlohmann::json out = nlohmann::json::object();
  for (const PrepareSplit* split : {&r.train, &r.val}) {
    for (size_t i = 0; i < split->shards.size() && i < split->checksums.size(); ++i) {
      const ShardChecksum& c = split->checksums[i];
      out[split->shards[i]] = {{"bin_bytes", c.bin_bytes}, {"bin_crc32", c.bin_crc32}, {"idx_bytes", c.idx_bytes},
                               {"idx_crc32", c.idx_crc32}};
      if (c.has_mask) {
        out[split->shards[i]]["mask_bytes"] = c.mask_bytes;
        out[split->shards[i]]["mask_crc32"] = c.mask_crc32;
      }
    }
  }
  return out;
}

// A checksum entry, each field an integer in range, or an error naming the shard.
ShardChecksum read_checksum(const nlohmann::json& j, const std::string& shard, const std::string& path) {
  ShardChecksum c;
  auto field = [&](const char* key, int64_t hi) -> int64_t {
    const bool ok = j.is_object() && j.contains(key) && j[key].is_number_unsigned() && j[key].get<uint64_t>() <= uint64_t(hi);
    FSDP_CHECK(ok, "{}: shard_checksums of {}: '{}' is missing or not an integer in [0, {}]", path, shard, key, hi);
    return j[key].get<int64_t>();
  };
  constexpr int64_t kMaxCrc = 0xffffffffLL, kMaxBytes = std::numeric_limits<int64_t>::max();
  c.bin_bytes = field("bin_bytes", kMaxBytes);
  c.idx_bytes = field("idx_bytes", kMaxBytes);
  c.bin_crc32 = uint32_t(field("bin_crc32", kMaxCrc));
  c.idx_crc32 = uint32_t(field("idx_crc32", kMaxCrc));
  if (j.contains("mask_bytes") || j.contains("mask_crc32")) {
    c.has_mask = true;
    c.mask_bytes = field("mask_bytes", kMaxBytes);
    c.mask_crc32 = uint32_t(field("mask_crc32", kMaxCrc));
  }
  return c;
}

}  // namespace

void write_shard_manifest(const fs::path& path, const PrepareOptions& o, const Tokenizer* tok, int64_t vocab_size,
                          const PrepareResult& r, const std::vector<nlohmann::json>& inputs) {
  using nlohmann::json;
  auto split = [](const PrepareSplit& s) {
    return json{{"shards", s.shards}, {"documents", s.documents}, {"tokens", s.tokens},
                {"trained_tokens", s.trained_tokens}};
  };
  json sft = nullptr;  // pretraining data: every token trained, no mask files
  if (r.sft) {
    json examples = json::object();
    for (int f = 0; f < kSftFormats; ++f)
      if (r.sft_examples[f] > 0) examples[sft_format_name(SftFormat(f))] = r.sft_examples[f];
    sft = {{"loss_mask", "<shard>.mask"},
           {"template", r.sft_template},
           {"train_on", train_on_name(o.sft.train_on)},
           {"sharegpt", o.sft.sharegpt},
           {"max_seq_len", o.sft.max_seq_len},
           {"overlong", o.sft.drop_overlong ? "drop" : "truncate"},
           {"examples", examples},
           {"truncated_examples", r.truncated},
           {"dropped_examples", r.dropped}};
  }
  json tokenizer = nullptr;  // pre-tokenized input_ids: whose tokenizer is not known here
  if (tok != nullptr) {
    std::error_code ec;
    // The file loaded (a model folder's tokenizer.json or tokenizer.model), and its kind.
    const fs::path tok_abs = fs::weakly_canonical(fs::absolute(tok->path()), ec);
    tokenizer = {{"path", ec ? tok->path() : tok_abs.string()},
                 {"kind", tok->kind() == Tokenizer::Kind::HuggingFace ? "tokenizer.json" : "sentencepiece"},
                 {"fnv1a64", tok->content_hash_hex()}};
  }
  const auto special = [&](int id) { return tok != nullptr ? json(id) : json(nullptr); };
  const json m = {
      {"format", "megatron-mmap-v1"},
      {"tokenizer", tokenizer},
      {"vocab_size", vocab_size},
      {"bos_id", special(tok != nullptr ? tok->bos_id() : -1)},
      {"eos_id", special(tok != nullptr ? tok->eos_id() : -1)},
      {"dtype", vocab_size <= 65536 ? "uint16" : "int32"},
      {"text_field", o.text_field},
      {"val_fraction", o.val_fraction},
      {"split_seed", o.split_seed},
      {"splits", {{"train", split(r.train)}, {"val", split(r.val)}}},
      {"inputs", inputs},
      {"jsonl_lines", r.jsonl_lines},
      {"text_records", r.text_records},
      {"bad_lines", r.bad_lines},
      {"shard_checksums", checksums(r)},
      {"sft", sft},
  };
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << m.dump(2) << '\n';
    out.flush();
    FSDP_CHECK(out.good(), "cannot write '{}'", tmp.string());
  }
  fs::rename(tmp, path);
}

std::optional<ShardManifest> read_shard_manifest(const std::string& dir) {
  const auto path = fs::path(dir) / "manifest.json";
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  const nlohmann::json j = json_file::read(path.string());
  FSDP_CHECK(j.is_object(), "{}: expected a JSON object, got {}", path.string(), json_file::kind(j));
  ShardManifest m;
  if (const nlohmann::json* v = json_file::find(j, "vocab_size"))
    m.vocab_size = json_file::integer(*v, "vocab_size", path.string());
  // null for pre-tokenized inputs (no tokenizer known), -1 for a tokenizer without one.
  if (const nlohmann::json* v = json_file::find(j, "eos_id"); v != nullptr && !v->is_null())
    m.eos_id = json_file::integer(*v, "eos_id", path.string());
  if (const nlohmann::json* t = json_file::find(j, "tokenizer")) {
    FSDP_CHECK(t->is_object(), "{}: 'tokenizer' must be an object, got {}", path.string(), json_file::kind(*t));
    m.tokenizer_path = json_file::string(*t, "path", path.string() + ": tokenizer", "");
  }
  if (j.contains("shard_checksums") && j["shard_checksums"].is_object()) {
    for (const auto& [shard, entry] : j["shard_checksums"].items())
      m.checksums[shard] = read_checksum(entry, shard, path.string());
  }
  return m;
}

}  // namespace fsdp::data
