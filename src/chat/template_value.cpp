// The template value type (fsdp/chat/template_value.h) and the Python semantics Jinja gives it:
// construction and lookup, truthiness, str() and repr() as Python prints them (floats in
// repr's shortest round-trip form, strings quoted and escaped as Python chooses), equality
// across int and float, ordering, and the binding of a call's arguments. Conversion to and
// from JSON is template_json.cpp's.
#include "fsdp/chat/template_value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

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
