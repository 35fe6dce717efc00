// JSON files users hand us (adapter_config.json, manifests, traces, config.json) read into
// nlohmann::json with messages that name the file and the key and say what is wrong in
// words, never nlohmann's own text ("[json.exception.type_error.302] type must be number,
// but is string"). Header-only: only the modules that already use nlohmann include it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdp/core/error.h"
#include "fsdp/core/regular_file.h"

namespace fsdp::json_file {

// "the string \"8\"", "the number 1.5", "a list", "an object", "null", "true".
inline std::string kind(const nlohmann::json& v) {
  const std::string text = v.dump();
  const std::string shown = text.size() > 40 ? text.substr(0, 37) + "..." : text;
  if (v.is_string()) return "the string " + shown;
  if (v.is_number()) return "the number " + shown;
  if (v.is_array()) return "a list";
  if (v.is_object()) return "an object";
  return shown;  // null, true, false
}

// Parses `text` (the content of `file`), or throws naming the file and where it broke:
// "<file>: not valid JSON (line 3, column 5: unexpected end of input)".
inline nlohmann::json parse(std::string_view text, const std::string& file) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    // what(): "[json.exception.parse_error.101] parse error at line 1, column 2: syntax error while parsing value
    // - invalid literal; last read: 'x'": keep the place and the reason's words.
    const std::string w = e.what();
    const size_t at = w.find(" at line ");
    const size_t colon = at == std::string::npos ? std::string::npos : w.find(':', at);
    const std::string place =
        colon == std::string::npos ? fmt::format("byte {}", e.byte) : w.substr(at + 4, colon - at - 4);
    size_t dash = w.find(" - ", colon == std::string::npos ? 0 : colon);
    std::string reason = dash == std::string::npos ? "" : w.substr(dash + 3);
    if (const size_t semi = reason.find(';'); semi != std::string::npos) reason.resize(semi);
    FSDP_FAIL("{}: not valid JSON ({}{}{})", file, place, reason.empty() ? "" : ": ", reason);
  } catch (const nlohmann::json::exception& e) {
    // out_of_range 406: "number overflow parsing '1e400'".
    const std::string w = e.what();
    const size_t q = w.find('\'');
    FSDP_FAIL("{}: not valid JSON: the number {} is out of range", file,
              q == std::string::npos ? std::string("in it") : w.substr(q));
  }
}

// An nlohmann exception's words without its "[json.exception.out_of_range.403] " prefix
// ("key 'model' not found"), for readers whose keys are read by nlohmann's from_json hooks.
inline std::string words(const nlohmann::json::exception& e) {
  const std::string w = e.what();
  const size_t end = w.starts_with("[json.exception.") ? w.find("] ") : std::string::npos;
  return end == std::string::npos ? w : w.substr(end + 2);
}

// The regular file at `path` (core/regular_file.h: a FIFO is refused, never waited on), parsed.
inline nlohmann::json read(const std::string& path) { return parse(read_regular_file(path), path); }

// Typed keys of an object `j` read from `file`. A missing key (or null) is an error naming it
// unless a fallback is given; a value of another JSON type is an error naming the key, the
// type it must have, and what it is.
inline const nlohmann::json* find(const nlohmann::json& j, std::string_view key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

inline const nlohmann::json& required(const nlohmann::json& j, std::string_view key, const std::string& file) {
  const nlohmann::json* v = find(j, key);
  FSDP_CHECK(v != nullptr, "{}: missing '{}'", file, key);
  return *v;
}

inline int64_t integer(const nlohmann::json& v, std::string_view key, const std::string& file) {
  FSDP_CHECK(v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)),
             "{}: '{}' must be an integer, got {}", file, key, kind(v));
  return v.get<int64_t>();
}
inline int64_t integer(const nlohmann::json& j, std::string_view key, const std::string& file, int64_t lo, int64_t hi) {
  const nlohmann::json& v = required(j, key, file);
  const int64_t x = integer(v, key, file);
  FSDP_CHECK(x >= lo && x <= hi, "{}: '{}' must be in [{}, {}], got {}", file, key, lo, hi, x);
  return x;
}

inline double number(const nlohmann::json& v, std::string_view key, const std::string& file) {
  FSDP_CHECK(v.is_number(), "{}: '{}' must be a number, got {}", file, key, kind(v));
  return v.get<double>();
}
inline double number(const nlohmann::json& j, std::string_view key, const std::string& file, double fallback) {
  const nlohmann::json* v = find(j, key);
  return v == nullptr ? fallback : number(*v, key, file);
}

inline bool boolean(const nlohmann::json& j, std::string_view key, const std::string& file, bool fallback) {
  const nlohmann::json* v = find(j, key);
  if (v == nullptr) return fallback;
  FSDP_CHECK(v->is_boolean(), "{}: '{}' must be true or false, got {}", file, key, kind(*v));
  return v->get<bool>();
}

inline std::string string(const nlohmann::json& j, std::string_view key, const std::string& file,
                          const std::string& fallback) {
  const nlohmann::json* v = find(j, key);
  if (v == nullptr) return fallback;
  FSDP_CHECK(v->is_string(), "{}: '{}' must be a string, got {}", file, key, kind(*v));
  return v->get<std::string>();
}

// A string or a list of strings (PEFT's target_modules), as a list.
inline std::vector<std::string> strings(const nlohmann::json& j, std::string_view key, const std::string& file) {
  const nlohmann::json& v = required(j, key, file);
  if (v.is_string()) return {v.get<std::string>()};
  FSDP_CHECK(v.is_array(), "{}: '{}' must be a string or a list of strings, got {}", file, key, kind(v));
  std::vector<std::string> out;
  for (const nlohmann::json& e : v) {
    FSDP_CHECK(e.is_string(), "{}: '{}' must be a list of strings, but holds {}", file, key, kind(e));
    out.push_back(e.get<std::string>());
  }
  return out;
}

}  // namespace fsdp::json_file
