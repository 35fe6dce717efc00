// Reading tokenizer.json with errors that name the JSON path: every problem with the file is
// one fsdp::Error such as
//   models/x/tokenizer.json: pre_tokenizer.pretokenizers[1].type: "UnicodeScripts" is not supported
//   models/x/tokenizer.json: model.merges[17]: expected "left right" or ["left", "right"]
// so a user sees which part of the file this tokenizer cannot run, never a silent difference.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace fsdp::data::hf {

class JsonNode {
 public:
  JsonNode(const nlohmann::json& j, const std::string& file, std::string path = "")
      : j_(&j), file_(&file), path_(std::move(path)) {}

  const nlohmann::json& json() const { return *j_; }
  const std::string& path() const { return path_; }
  bool is_null() const { return j_->is_null(); }
  bool has(std::string_view key) const { return j_->is_object() && j_->contains(key); }

  JsonNode at(std::string_view key) const;     // a missing key is an error
  JsonNode at(size_t index) const;             // of an array
  // The key's node, or nullopt when absent or null.
  std::optional<JsonNode> get(std::string_view key) const;

  size_t size() const;  // of an array (an error for anything else)
  std::string string() const;
  bool boolean() const;
  int64_t integer() const;
  double number() const;
  // Optional scalars with a default when absent or null.
  bool boolean_or(std::string_view key, bool fallback) const;
  std::string string_or(std::string_view key, const std::string& fallback) const;
  // The "type" of a pipeline component.
  std::string type() const { return at("type").string(); }

  [[noreturn]] void fail(const std::string& message) const;
  [[noreturn]] void unsupported(const std::string& what) const;  // `"<what>" is not supported`

 private:
  std::string child(std::string_view key) const;
  const nlohmann::json* j_;
  const std::string* file_;
  std::string path_;
};

}  // namespace fsdp::data::hf
