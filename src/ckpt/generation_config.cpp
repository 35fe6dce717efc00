// A model folder's end-of-generation ids; see generation_config.h.
#include "fsdp/ckpt/generation_config.h"

#include <filesystem>
#include <optional>

#include "fsdp/core/json_file.h"

namespace fs = std::filesystem;

namespace fsdp::ckpt {

namespace {

// The file's eos_token_id as a list, or nothing when the file or the key is absent (or null).
std::optional<std::vector<int32_t>> eos_of(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  const std::string file = path.string();
  const nlohmann::json j = json_file::read(file);
  FSDP_CHECK(j.is_object(), "{}: expected a JSON object, got {}", file, json_file::kind(j));
  const nlohmann::json* v = json_file::find(j, "eos_token_id");
  if (v == nullptr || v->is_null()) return std::nullopt;
  auto id = [&](const nlohmann::json& e) {
    FSDP_CHECK(e.is_number_integer() && e.get<int64_t>() >= 0 && e.get<int64_t>() <= INT32_MAX,
               "{}: 'eos_token_id' must be a token id or a list of token ids, but holds {}", file, json_file::kind(e));
    return int32_t(e.get<int64_t>());
  };
  std::vector<int32_t> ids;
  if (v->is_array()) {
    for (const nlohmann::json& e : *v) ids.push_back(id(e));
  } else {
    ids.push_back(id(*v));
  }
  return ids;
}

}  // namespace

std::vector<int32_t> hf_eos_token_ids(const std::string& folder) {
  if (auto ids = eos_of(fs::path(folder) / "generation_config.json")) return *ids;
  if (auto ids = eos_of(fs::path(folder) / "config.json")) return *ids;
  return {};
}

}  // namespace fsdp::ckpt
