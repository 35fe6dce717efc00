// Template values to and from JSON: the messages, tools and extra variables a caller passes
// in (from_json, keeping object key order as Python's json.loads does), and transformers'
// tojson filter (to_json), which is Python's json.dumps rather than Jinja's HTML-escaping
// tojson, so its spacing, escapes, float digits and NaN/Infinity follow json.dumps byte for
// byte. Declared in fsdp/chat/template_value.h beside the value type.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdp/chat/python_string.h"
#include "fsdp/chat/template_value.h"

namespace fsdp::chat {

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u > uint64_t(INT64_MAX)) throw TemplateValueError{"integer " + std::to_string(u) + " is too large"};
      return Value(int64_t(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      ValueItems items;
      items.reserve(j.size());
      for (const auto& [k, e] : j.items()) items.emplace_back(Value(k), from_json(e));
      return Value::dict(std::move(items));
    }
    default: throw TemplateValueError{"JSON value of type " + std::string(j.type_name()) + " is not supported"};
  }
}

namespace {

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  char buf[16];
  for (char32_t c : py::decode(s)) {
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
      if (c >= 0x10000) {  // a surrogate pair, as Python writes it
        const char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", unsigned(0xD800 + (v >> 10)), unsigned(0xDC00 + (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
      }
      out += buf;
    } else {
      py::append_utf8(out, c);
    }
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return python_float_repr(d);
}

struct JsonWriter {
  bool ensure_ascii;
  bool indented;
  std::string indent;
  std::string item_sep, key_sep;
  bool sort_keys;

  std::string key(const Value& k) const {
    switch (k.kind()) {
      case Value::Kind::String: return k.as_string();
      case Value::Kind::Bool: return k.as_bool() ? "true" : "false";
      case Value::Kind::None: return "null";
      case Value::Kind::Int: return std::to_string(k.as_int());
      case Value::Kind::Float: return json_float(k.as_float());
      default: throw TemplateValueError{"keys must be str, int, float, bool or None, not " + k.type_name()};
    }
  }

  void newline(std::string& out, int level) const {
    if (!indented) return;
    out += '\n';
    for (int i = 0; i < level; ++i) out += indent;
  }

  void write(std::string& out, const Value& v, int level) const {
    switch (v.kind()) {
      case Value::Kind::None: out += "null"; return;
      case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
      case Value::Kind::Int: out += std::to_string(v.as_int()); return;
      case Value::Kind::Float: out += json_float(v.as_float()); return;
      case Value::Kind::String: json_string(out, v.as_string(), ensure_ascii); return;
      case Value::Kind::List:
      case Value::Kind::Tuple: {
        if (v.items().empty()) {
          out += "[]";
          return;
        }
        out += '[';
        newline(out, level + 1);
        for (size_t i = 0; i < v.items().size(); ++i) {
          if (i) {
            out += item_sep;
            newline(out, level + 1);
          }
          write(out, v.items()[i], level + 1);
        }
        newline(out, level);
        out += ']';
        return;
      }
      case Value::Kind::Dict: {
        if (v.dict_items().empty()) {
          out += "{}";
          return;
        }
        std::vector<std::pair<std::string, const Value*>> items;
        for (const auto& [k, e] : v.dict_items()) items.emplace_back(key(k), &e);
        if (sort_keys)
          std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        out += '{';
        newline(out, level + 1);
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) {
            out += item_sep;
            newline(out, level + 1);
          }
          json_string(out, items[i].first, ensure_ascii);
          out += key_sep;
          write(out, *items[i].second, level + 1);
        }
        newline(out, level);
        out += '}';
        return;
      }
      default: throw TemplateValueError{"Object of type " + v.type_name() + " is not JSON serializable"};
    }
  }
};

}  // namespace

std::string to_json(const Value& v, bool ensure_ascii, const Value& indent, const Value& separators, bool sort_keys) {
  JsonWriter w{ensure_ascii, false, "", ", ", ": ", sort_keys};
  if (!indent.is_none() && !indent.is_undefined()) {
    w.indented = true;
    w.item_sep = ",";  // json.dumps: no space before the newline when indenting
    if (indent.is_string()) w.indent = indent.as_string();
    else if (indent.is_number() && !indent.is_float()) w.indent = std::string(size_t(std::max<int64_t>(0, indent.as_int())), ' ');
    else throw TemplateValueError{"tojson: indent must be an integer or a string, not " + indent.type_name()};
  }
  if (!separators.is_none() && !separators.is_undefined()) {
    if (!separators.is_sequence() || separators.items().size() != 2 || !separators.items()[0].is_string() ||
        !separators.items()[1].is_string())
      throw TemplateValueError{"tojson: separators must be a pair of strings"};
    w.item_sep = separators.items()[0].as_string();
    w.key_sep = separators.items()[1].as_string();
  }
  std::string out;
  w.write(out, v, 0);
  return out;
}

}  // namespace fsdp::chat
