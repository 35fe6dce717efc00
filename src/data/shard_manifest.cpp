#include "fsdp/data/shard_manifest.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "fsdp/core/error.h"
#include "fsdp/data/tokenizer.h"

namespace fs = std::filesystem;

namespace fsdp::data {

void write_shard_manifest(const fs::path& path, const PrepareOptions& o, const Tokenizer* tok, int64_t vocab_size,
                          const PrepareResult& r, const std::vector<nlohmann::json>& inputs) {
  using nlohmann::json;
  auto split = [](const PrepareSplit& s) {
    return json{{"shards", s.shards}, {"documents", s.documents}, {"tokens", s.tokens}};
  };
  json tokenizer = nullptr;  // pre-tokenized input_ids: whose tokenizer is not known here
  if (tok != nullptr) {
    std::error_code ec;
    const fs::path tok_abs = fs::weakly_canonical(fs::absolute(o.tokenizer), ec);
    tokenizer = {{"path", ec ? o.tokenizer : tok_abs.string()}, {"fnv1a64", tok->content_hash_hex()}};
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
      {"bad_lines", r.bad_lines},
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
  if (!fs::exists(path)) return std::nullopt;
  std::ifstream in(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    FSDP_FAIL("{}: not valid JSON: {}", path.string(), e.what());
  }
  ShardManifest m;
  if (j.contains("vocab_size")) m.vocab_size = j["vocab_size"].get<int64_t>();
  if (j.contains("tokenizer") && j["tokenizer"].contains("path")) m.tokenizer_path = j["tokenizer"]["path"].get<std::string>();
  return m;
}

}  // namespace fsdp::data
