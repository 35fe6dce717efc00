#include "fsdp/chat/template_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "fsdp/chat/python_string.h"

namespace fsdp::chat {

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}

Value::Value(bool b) : kind_(Kind::Bool), b_(b) {}
Value::Value(int64_t v) : kind_(Kind::Int), i_(v) {}
Value::Value(double v) : kind_(Kind::Float), f_(v) {}
Value::Value(std::string s) : kind_(Kind::String), s_(std::make_shared<const std::string>(std::move(s))) {}

Value Value::list(ValueList items) {
  Value v;
  v.kind_ = Kind::List;
  v.list_ = std::make_shared<const ValueList>(std::move(items));
  return v;
}

Value Value::tuple(ValueList items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::Tuple;
  return v;
}

Value Value::dict(ValueItems items) {
  Value v;
  v.kind_ = Kind::Dict;
  v.dict_ = std::make_shared<const ValueItems>(std::move(items));
  return v;
}

Value Value::make_namespace(std::vector<std::pair<std::string, Value>> attrs) {
  Value v;
  v.kind_ = Kind::Namespace;
  v.attrs_ = std::make_shared<std::vector<std::pair<std::string, Value>>>(std::move(attrs));
  return v;
}

Value Value::object(std::string type_name, std::vector<std::pair<std::string, Value>> attrs) {
  Value v;
  v.kind_ = Kind::Object;
  v.s_ = std::make_shared<const std::string>(std::move(type_name));
  v.attrs_ = std::make_shared<std::vector<std::pair<std::string, Value>>>(std::move(attrs));
  return v;
}

Value Value::function(std::string name, std::function<Value(CallArgs&)> fn) {
  Value v;
  v.kind_ = Kind::Function;
  v.fn_ = std::make_shared<const Function>(Function{std::move(name), std::move(fn)});
  return v;
}

const std::string& Value::undefined_hint() const {
  static const std::string none;
  return kind_ == Kind::Undefined && s_ ? *s_ : none;
}

const Value* Value::find(const Value& key) const {
  if (kind_ != Kind::Dict) return nullptr;
  for (const auto& [k, v] : *dict_)
    if (equals(k, key)) return &v;
  return nullptr;
}

const Value* Value::find(std::string_view key) const {
  if (kind_ != Kind::Dict) return nullptr;
  for (const auto& [k, v] : *dict_)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}

const Value* Value::attribute(std::string_view name) const {
  if (!attrs_) return nullptr;
  for (const auto& [k, v] : *attrs_)
    if (k == name) return &v;
  return nullptr;
}

void Value::set_attribute(const std::string& name, Value v) const {
  for (auto& [k, old] : *attrs_) {
    if (k == name) {
      old = std::move(v);
      return;
    }
  }
  attrs_->emplace_back(name, std::move(v));
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return "list";
    case Kind::Tuple: return "tuple";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Object: return *s_;
    case Kind::Function: return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.as_bool();
    case Value::Kind::Int: return v.as_int() != 0;
    case Value::Kind::Float: return v.as_float() != 0.0;
    case Value::Kind::String: return !v.as_string().empty();
    case Value::Kind::List:
    case Value::Kind::Tuple: return !v.items().empty();
    case Value::Kind::Dict: return !v.dict_items().empty();
    default: return true;
  }
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  // The shortest digits that read back as d (Python's repr uses the same rule), then Python's
  // layout: positional for exponents -4..15, else d.ddde+XX with at least two exponent digits.
  const auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  const int exp = std::stoi(sci.substr(epos + 1));
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(size_t(-exp - 1), '0') + digits;
    } else if (size_t(exp) + 1 >= digits.size()) {
      out += digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char e[16];
  std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + e;
}

namespace {

// Python's str.isprintable() for the characters chat text holds; repr() escapes the rest.
bool printable(char32_t c) {
  if (c < 0x20 || c == 0x7F || (c >= 0x80 && c <= 0xA0) || c == 0xAD) return false;
  if (c > 0x7F && py::is_space(c)) return false;  // Zs, Zl, Zp other than ' '
  if ((c >= 0x200B && c <= 0x200F) || (c >= 0x202A && c <= 0x202E) || (c >= 0x2060 && c <= 0x2064) ||
      c == 0xFEFF || (c >= 0xE000 && c <= 0xF8FF))
    return false;  // format and private-use characters
  return true;
}

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : py::decode(s)) {
    if (c == char32_t(quote) || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!printable(c)) {
      char buf[16];
      if (c < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
      else if (c < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
      else std::snprintf(buf, sizeof buf, "\\U%08x", unsigned(c));
      out += buf;
    } else {
      py::append_utf8(out, c);
    }
  }
  out += quote;
  return out;
}

std::string repr_sequence(const ValueList& items, bool tuple) {
  std::string out = tuple ? "(" : "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += repr(items[i]);
  }
  if (tuple && items.size() == 1) out += ",";
  out += tuple ? ")" : "]";
  return out;
}

std::string repr_items(const ValueItems& items) {
  std::string out = "{";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += repr(items[i].first) + ": " + repr(items[i].second);
  }
  return out + "}";
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.as_bool() ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.as_int());
    case Value::Kind::Float: return python_float_repr(v.as_float());
    case Value::Kind::String: return v.as_string();
    case Value::Kind::List: return repr_sequence(v.items(), false);
    case Value::Kind::Tuple: return repr_sequence(v.items(), true);
    case Value::Kind::Dict: return repr_items(v.dict_items());
    case Value::Kind::Namespace: {
      std::string out = "<Namespace {";
      for (size_t i = 0; i < v.attributes().size(); ++i) {
        if (i) out += ", ";
        out += repr(Value(v.attributes()[i].first)) + ": " + repr(v.attributes()[i].second);
      }
      return out + "}>";
    }
    case Value::Kind::Object: return "<" + v.type_name() + ">";
    case Value::Kind::Function: return "<function " + v.as_function().name + ">";
  }
  return "";
}

std::string repr(const Value& v) {
  if (v.is_string()) return repr_string(v.as_string());
  if (v.is_undefined()) return "Undefined";
  return to_str(v);
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String: return a.as_string() == b.as_string();
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      const auto &x = a.items(), &y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case Value::Kind::Dict: {
      if (a.dict_items().size() != b.dict_items().size()) return false;
      for (const auto& [k, v] : a.dict_items()) {
        const Value* other = b.find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    default: return &a == &b;
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_float(), y = b.as_float();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if ((a.is_list() && b.is_list()) || (a.is_tuple() && b.is_tuple())) {
    const auto &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  throw TemplateValueError{"'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() +
                           "'"};
}

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

namespace fsdp::chat {

Value CallArgs::get(size_t index, std::string_view name, Value dflt) const {
  if (index < positional.size()) return positional[index];
  for (const auto& [k, v] : keyword)
    if (k == name) return v;
  return dflt;
}

void CallArgs::check(std::string_view fn, size_t max_positional, std::initializer_list<std::string_view> names) const {
  if (positional.size() > max_positional)
    throw TemplateValueError{std::string(fn) + "() takes at most " + std::to_string(max_positional) + " argument" +
                             (max_positional == 1 ? "" : "s") + ", " + std::to_string(positional.size()) + " given"};
  size_t i = 0;
  for (const auto& [k, v] : keyword) {
    bool known = false;
    i = 0;
    for (auto n : names) {
      if (n == k) {
        known = true;
        if (i < positional.size())
          throw TemplateValueError{std::string(fn) + "() got multiple values for argument '" + k + "'"};
      }
      ++i;
    }
    if (!known) throw TemplateValueError{std::string(fn) + "() got an unexpected keyword argument '" + k + "'"};
  }
}

}  // namespace fsdp::chat
