// tokenizer.json's readers with path-naming errors; see json_node.h.
#include "json_node.h"

#include "fsdp/core/error.h"

namespace fsdp::data::hf {

namespace {

const char* kind(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::object: return "an object";
    case nlohmann::json::value_t::array: return "an array";
    case nlohmann::json::value_t::string: return "a string";
    case nlohmann::json::value_t::boolean: return "a boolean";
    default: return "a number";
  }
}

}  // namespace

std::string JsonNode::child(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

void JsonNode::fail(const std::string& message) const {
  FSDP_FAIL("{}: {}{}{}", *file_, path_, path_.empty() ? "" : ": ", message);
}

void JsonNode::unsupported(const std::string& what) const { fail("\"" + what + "\" is not supported"); }

JsonNode JsonNode::at(std::string_view key) const {
  if (!j_->is_object()) fail(std::string("expected an object, found ") + kind(*j_));
  const auto it = j_->find(key);
  if (it == j_->end()) JsonNode(*j_, *file_, child(key)).fail("missing");
  return JsonNode(*it, *file_, child(key));
}

JsonNode JsonNode::at(size_t index) const {
  if (!j_->is_array()) fail(std::string("expected an array, found ") + kind(*j_));
  if (index >= j_->size()) fail("has no element " + std::to_string(index));
  return JsonNode((*j_)[index], *file_, path_ + "[" + std::to_string(index) + "]");
}

std::optional<JsonNode> JsonNode::get(std::string_view key) const {
  if (!j_->is_object()) fail(std::string("expected an object, found ") + kind(*j_));
  const auto it = j_->find(key);
  if (it == j_->end() || it->is_null()) return std::nullopt;
  return JsonNode(*it, *file_, child(key));
}

size_t JsonNode::size() const {
  if (!j_->is_array()) fail(std::string("expected an array, found ") + kind(*j_));
  return j_->size();
}

std::string JsonNode::string() const {
  if (!j_->is_string()) fail(std::string("expected a string, found ") + kind(*j_));
  return j_->get<std::string>();
}

bool JsonNode::boolean() const {
  if (!j_->is_boolean()) fail(std::string("expected true or false, found ") + kind(*j_));
  return j_->get<bool>();
}

int64_t JsonNode::integer() const {
  if (!j_->is_number_integer() && !j_->is_number_unsigned()) fail(std::string("expected an integer, found ") + kind(*j_));
  return j_->get<int64_t>();
}

double JsonNode::number() const {
  if (!j_->is_number()) fail(std::string("expected a number, found ") + kind(*j_));
  return j_->get<double>();
}

bool JsonNode::boolean_or(std::string_view key, bool fallback) const {
  const auto n = get(key);
  return n ? n->boolean() : fallback;
}

std::string JsonNode::string_or(std::string_view key, const std::string& fallback) const {
  const auto n = get(key);
  return n ? n->string() : fallback;
}

}  // namespace fsdp::data::hf
