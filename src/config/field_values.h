// How each config field type is read from YAML, written back and named: the YAML spelling
// of each enumerator (Choices), read_value / write_value per type (write_value's text reads
// back equal), and type_name for describe_keys. The field table (schema.cpp) builds its rows
// from these; they are one idea apart from the table itself.
#pragma once

#include <charconv>
#include <climits>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "fsdp/core/cli_args.h"
#include "fsdp/config/config.h"

namespace fsdp::config::field_values {

// ---- Choices: the YAML spelling of each enumerator -----------------------------------
template <class E>
struct Choices;
template <>
struct Choices<DataSource> {
  static constexpr std::pair<DataSource, std::string_view> table[] = {
      {DataSource::Synthetic, "synthetic"}, {DataSource::Shards, "shards"}};
};
template <>
struct Choices<LrSchedule> {
  static constexpr std::pair<LrSchedule, std::string_view> table[] = {
      {LrSchedule::Cosine, "cosine"}, {LrSchedule::Linear, "linear"}, {LrSchedule::Constant, "constant"}};
};
template <>
struct Choices<ShardingStrategy> {
  static constexpr std::pair<ShardingStrategy, std::string_view> table[] = {
      {ShardingStrategy::FULL_SHARD, "FULL_SHARD"},
      {ShardingStrategy::SHARD_GRAD_OP, "SHARD_GRAD_OP"},
      {ShardingStrategy::NO_SHARD, "NO_SHARD"},
      {ShardingStrategy::HYBRID_SHARD, "HYBRID_SHARD"},
      {ShardingStrategy::HYBRID_SHARD_ZERO2, "HYBRID_SHARD_ZERO2"}};
  // Other spellings read as the same enumerator (never written, never listed): PyTorch's
  // private name, so a strategy copied from a PyTorch script reads as it is.
  static constexpr std::pair<ShardingStrategy, std::string_view> aliases[] = {
      {ShardingStrategy::HYBRID_SHARD_ZERO2, "_HYBRID_SHARD_ZERO2"}};
};
// The dtypes a run may ask for (a subset of fsdp::DType), spelled as dtype_name spells them.
template <>
struct Choices<DType> {
  static constexpr std::pair<DType, std::string_view> table[] = {
      {DType::F32, "float32"}, {DType::BF16, "bfloat16"}, {DType::F16, "float16"}};
};

template <class E>
concept Choice = requires { Choices<E>::table; };

template <Choice E>
std::string_view name_of(E v) {
  for (const auto& [e, name] : Choices<E>::table)
    if (e == v) return name;
  return "?";  // only reachable for a DType outside the accepted subset
}

template <Choice E>
std::string choice_list(std::string_view sep) {
  std::string out;
  for (const auto& [e, name] : Choices<E>::table) out += (out.empty() ? "" : std::string(sep)) + std::string(name);
  return out;
}

// ---- Reading a node as each field type ---------------------------------------------
inline std::string shown(const YAML::Node& n) {
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a list";
  if (!n.IsScalar()) return "an empty value";
  return fmt::format("'{}'", n.Scalar());
}

// The scalar's text without a leading '+' (from_chars takes only '-').
inline std::string_view number_text(const std::string& s) {
  std::string_view t = s;
  if (t.size() > 1 && t[0] == '+' && t[1] != '-') t.remove_prefix(1);
  return t;
}

inline std::string read_value(const YAML::Node& n, int& out) {
  if (!n.IsScalar()) return "expects an integer, got " + shown(n);
  const std::string_view t = number_text(n.Scalar());
  long long v = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || end != t.data() + t.size() || (ec != std::errc() && ec != std::errc::result_out_of_range))
    return "expects an integer, got " + shown(n);
  if (ec == std::errc::result_out_of_range || v < INT_MIN || v > INT_MAX)
    return fmt::format("expects an integer, got {} (out of range)", shown(n));
  out = static_cast<int>(v);
  return "";
}

inline std::string read_value(const YAML::Node& n, double& out) {
  if (!n.IsScalar()) return "expects a number, got " + shown(n);
  const std::string_view t = number_text(n.Scalar());
  double v = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || end != t.data() + t.size() || (ec != std::errc() && ec != std::errc::result_out_of_range))
    return "expects a number, got " + shown(n);
  if (ec == std::errc::result_out_of_range || !std::isfinite(v))
    return fmt::format("expects a finite number, got {}", shown(n));
  out = v;
  return "";
}

inline std::string read_value(const YAML::Node& n, bool& out) {
  const std::string s = n.IsScalar() ? n.Scalar() : "";
  if (s == "true" || s == "True" || s == "TRUE") out = true;
  else if (s == "false" || s == "False" || s == "FALSE") out = false;
  else return "expects true or false, got " + shown(n);
  return "";
}

inline std::string read_value(const YAML::Node& n, std::string& out) {
  if (n.IsNull()) {
    out.clear();
    return "";
  }
  if (!n.IsScalar()) return "expects a string, got " + shown(n);
  out = n.Scalar();
  return "";
}

// A list of names: a YAML sequence of scalars, or one scalar holding one name or several
// separated by commas (what --set lora.targets=q_proj,v_proj gives).
inline std::string read_value(const YAML::Node& n, std::vector<std::string>& out) {
  std::vector<std::string> v;
  auto add = [&](const std::string& text) {
    for (size_t p = 0;;) {
      const size_t q = text.find(',', p);
      std::string item = text.substr(p, q == std::string::npos ? std::string::npos : q - p);
      item.erase(0, item.find_first_not_of(' '));
      item.erase(item.find_last_not_of(' ') + 1);
      if (!item.empty()) v.push_back(item);
      if (q == std::string::npos) break;
      p = q + 1;
    }
  };
  if (n.IsScalar()) {
    add(n.Scalar());
  } else if (n.IsSequence()) {
    for (const auto& e : n) {
      if (!e.IsScalar()) return "expects a list of names, got an entry that is " + shown(e);
      add(e.Scalar());
    }
  } else if (!n.IsNull()) {
    return "expects a list of names, got " + shown(n);
  }
  out = std::move(v);
  return "";
}

template <Choice E>
std::string read_value(const YAML::Node& n, E& out) {
  if (n.IsScalar()) {
    for (const auto& [e, name] : Choices<E>::table) {
      if (n.Scalar() == name) {
        out = e;
        return "";
      }
    }
    if constexpr (requires { Choices<E>::aliases; }) {
      for (const auto& [e, name] : Choices<E>::aliases) {
        if (n.Scalar() == name) {
          out = e;
          return "";
        }
      }
    }
  }
  std::string guess;
  if (n.IsScalar()) {
    std::vector<std::string> names;
    for (const auto& [e, name] : Choices<E>::table) names.emplace_back(name);
    guess = closest_value(n.Scalar(), names);
  }
  return fmt::format("must be one of {}, got {}{}", choice_list<E>(", "), shown(n),
                     guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess));
}

template <class T>
std::string read_value(const YAML::Node& n, std::optional<T>& out) {
  if (n.IsNull()) {
    out.reset();
    return "";
  }
  T v{};
  std::string err = read_value(n, v);
  if (err.empty()) out = v;
  return err;
}

// ---- Writing each field type as a YAML scalar (read_value reads it back equal) --------
inline std::string write_value(int v) { return std::to_string(v); }
inline std::string write_value(double v) {
  std::string s = fmt::format("{}", v);  // shortest text that round-trips
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // 10000 -> 10000.0: reads as a float
  return s;
}
inline std::string write_value(bool v) { return v ? "true" : "false"; }
inline std::string write_value(const std::string& v) {
  YAML::Emitter e;  // quotes "", "null", "a: b", ... and leaves plain words plain
  e << v;
  return e.c_str();
}
inline std::string write_value(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + write_value(v[i]);
  return out + "]";
}
template <Choice E>
std::string write_value(E v) {
  return std::string(name_of(v));
}
template <class T>
std::string write_value(const std::optional<T>& v) {
  return v ? write_value(*v) : "null";
}

// ---- Type names for describe_keys ----------------------------------------------------
template <class T>
struct Unwrap {
  using type = T;
  static constexpr bool optional = false;
};
template <class T>
struct Unwrap<std::optional<T>> {
  using type = T;
  static constexpr bool optional = true;
};

template <class T>
std::string type_name() {
  if constexpr (Unwrap<T>::optional) return type_name<typename Unwrap<T>::type>() + " or null";
  else if constexpr (std::is_same_v<T, int>) return "integer";
  else if constexpr (std::is_same_v<T, double>) return "number";
  else if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_same_v<T, std::string>) return "string";
  else if constexpr (std::is_same_v<T, std::vector<std::string>>) return "list of names";
  else return choice_list<T>(" | ");
}

}  // namespace fsdp::config::field_values
