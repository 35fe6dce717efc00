// Reaching into values: iteration, `obj[key]`, `obj.name`, and the string and dict methods
// templates call (`content.strip()`, `message.get('x')`), with Jinja's and Python's semantics.
#include <algorithm>
#include <optional>

#include "fsdp/chat/python_string.h"
#include "fsdp/chat/template_builtins.h"
#include "fsdp/chat/template_parser.h"

namespace fsdp::chat {

void fail_undefined(const Value& v) {
  throw TemplateValueError{v.undefined_hint().empty() ? "a value is undefined" : v.undefined_hint()};
}

ValueList iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List:
    case Value::Kind::Tuple: return v.items();
    case Value::Kind::Dict: {
      ValueList keys;
      for (const auto& [k, e] : v.dict_items()) keys.push_back(k);
      return keys;
    }
    case Value::Kind::String: {
      ValueList chars;
      for (char32_t c : py::decode(v.as_string())) {
        std::string s;
        py::append_utf8(s, c);
        chars.emplace_back(std::move(s));
      }
      return chars;
    }
    default: throw TemplateValueError{"'" + v.type_name() + "' object is not iterable"};
  }
}

namespace {

const char* kind_label(const Value& obj) {
  switch (obj.kind()) {
    case Value::Kind::Dict: return "dict object";
    case Value::Kind::List: return "list object";
    case Value::Kind::Tuple: return "tuple object";
    case Value::Kind::String: return "str object";
    case Value::Kind::None: return "None";
    case Value::Kind::Namespace: return "Namespace object";
    default: return nullptr;
  }
}

Value missing(const Value& obj, const std::string& what) {
  const char* label = kind_label(obj);
  return Value::undefined("'" + (label ? std::string(label) : obj.type_name() + " object") + "' has no attribute '" +
                          what + "'");
}

Value bound_method(const Value& obj, const std::string& name) {
  return Value::function(name, [obj, name](CallArgs& args) { return call_method(obj, name, args); });
}

// Python's index normalisation: -1 is the last element; out of range is nullopt.
std::optional<size_t> index_of(int64_t i, size_t n) {
  if (i < 0) i += int64_t(n);
  if (i < 0 || i >= int64_t(n)) return std::nullopt;
  return size_t(i);
}

}  // namespace

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  switch (obj.kind()) {
    case Value::Kind::Dict:
      if (const Value* v = obj.find(key)) return *v;
      break;
    case Value::Kind::List:
    case Value::Kind::Tuple:
      if (key.is_int() || key.is_bool()) {
        if (auto i = index_of(key.as_int(), obj.items().size())) return obj.items()[*i];
        return Value::undefined("'" + std::string(kind_label(obj)) + "' has no element " + std::to_string(key.as_int()));
      }
      break;
    case Value::Kind::String:
      if (key.is_int() || key.is_bool()) {
        const auto cps = py::decode(obj.as_string());
        if (auto i = index_of(key.as_int(), cps.size())) return Value(py::encode(cps, *i, *i + 1));
        return Value::undefined("'str object' has no element " + std::to_string(key.as_int()));
      }
      break;
    default: break;
  }
  // Jinja falls back to the attribute of that name (`message['items']` is the dict's method).
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined(std::string("'") + (kind_label(obj) ? kind_label(obj) : obj.type_name().c_str()) +
                          "' has no element " + repr(key));
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (!name.empty() && name[0] == '_') return missing(obj, name);  // the sandbox hides them
  if (has_method(obj, name)) return bound_method(obj, name);
  switch (obj.kind()) {
    case Value::Kind::Dict:
      if (const Value* v = obj.find(std::string_view(name))) return *v;
      break;
    case Value::Kind::Namespace:
    case Value::Kind::Object:
      if (const Value* v = obj.attribute(name)) return *v;
      break;
    default: break;
  }
  return missing(obj, name);
}

namespace {

constexpr std::string_view kStringMethods[] = {"strip", "lstrip", "rstrip", "startswith", "endswith", "split",
                                               "rsplit", "splitlines", "replace", "upper", "lower", "title",
                                               "capitalize", "find", "rfind", "index", "rindex", "count", "join",
                                               "islower", "isupper"};
constexpr std::string_view kDictMethods[] = {"items", "keys", "values", "get"};

bool in(std::string_view name, const auto& names) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

std::optional<std::string> opt_string(const Value& v, const char* what) {
  if (v.is_none() || v.is_undefined()) return std::nullopt;
  if (!v.is_string()) throw TemplateValueError{std::string(what) + " arg must be None or str"};
  return v.as_string();
}

int64_t int_arg(const Value& v, const char* fn) {
  if (!v.is_int() && !v.is_bool())
    throw TemplateValueError{"'" + v.type_name() + "' object cannot be interpreted as an integer (" + fn + ")"};
  return v.as_int();
}

Value string_list(const std::vector<std::string>& parts) {
  ValueList out;
  out.reserve(parts.size());
  for (const auto& p : parts) out.emplace_back(p);
  return Value::list(std::move(out));
}

Value string_method(const std::string& s, std::string_view name, const CallArgs& a) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    a.check(name, 1, {});
    return Value(py::strip(s, opt_string(a.get(0, ""), name.data()), name != "rstrip", name != "lstrip"));
  }
  if (name == "startswith" || name == "endswith") {
    a.check(name, 1, {});
    const Value p = a.get(0, "");
    ValueList options = p.is_tuple() ? p.items() : ValueList{p};
    for (const auto& o : options) {
      if (!o.is_string())
        throw TemplateValueError{std::string(name) + " first arg must be str or a tuple of str, not " + o.type_name()};
      const auto& x = o.as_string();
      const bool hit = name == "startswith" ? s.compare(0, x.size(), x) == 0
                                            : s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
      if (hit) return Value(true);
    }
    return Value(false);
  }
  if (name == "split" || name == "rsplit") {
    a.check(name, 2, {"sep", "maxsplit"});
    const auto sep = opt_string(a.get(0, "sep", Value::none()), "sep");
    if (sep && sep->empty()) throw TemplateValueError{"empty separator"};
    const int64_t maxsplit = int_arg(a.get(1, "maxsplit", Value(int64_t(-1))), "maxsplit");
    return string_list(name == "split" ? py::split(s, sep, maxsplit) : py::rsplit(s, sep, maxsplit));
  }
  if (name == "splitlines") {
    a.check(name, 0, {});
    return string_list(py::splitlines(s));
  }
  if (name == "replace") {
    a.check(name, 3, {"count"});
    const Value o = a.get(0, ""), r = a.get(1, "");
    if (!o.is_string() || !r.is_string()) throw TemplateValueError{"replace() arguments must be str"};
    return Value(py::replace(s, o.as_string(), r.as_string(), int_arg(a.get(2, "count", Value(int64_t(-1))), "count")));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "islower" ||
      name == "isupper") {
    a.check(name, 0, {});
    if (name == "upper") return Value(py::upper(s));
    if (name == "lower") return Value(py::lower(s));
    if (name == "title") return Value(py::title(s));
    if (name == "islower") return Value(py::is_lower(s));
    if (name == "isupper") return Value(py::is_upper(s));
    return Value(py::capitalize(s));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    a.check(name, 1, {});
    const Value sub = a.get(0, "");
    if (!sub.is_string()) throw TemplateValueError{"must be str, not " + sub.type_name()};
    if (name == "count") return Value(py::count(s, sub.as_string()));
    const int64_t at = py::find(s, sub.as_string(), name[0] == 'r');
    if (at < 0 && (name == "index" || name == "rindex")) throw TemplateValueError{"substring not found"};
    return Value(at);
  }
  if (name == "join") {
    a.check(name, 1, {});
    std::string out;
    bool first = true;
    for (const auto& item : iterate(a.get(0, ""))) {
      if (!item.is_string())
        throw TemplateValueError{"sequence item: expected str instance, " + item.type_name() + " found"};
      if (!first) out += s;
      first = false;
      out += item.as_string();
    }
    return Value(std::move(out));
  }
  throw TemplateValueError{"'str object' has no attribute '" + std::string(name) + "'"};
}

Value dict_method(const Value& d, std::string_view name, const CallArgs& a) {
  if (name == "get") {
    a.check(name, 2, {});
    if (a.positional.empty()) throw TemplateValueError{"get expected at least 1 argument, got 0"};
    const Value* v = d.find(a.positional[0]);
    return v ? *v : a.get(1, "", Value::none());
  }
  a.check(name, 0, {});
  ValueList out;
  for (const auto& [k, v] : d.dict_items()) {
    if (name == "items") out.push_back(Value::tuple({k, v}));
    else out.push_back(name == "keys" ? k : v);
  }
  return Value::list(std::move(out));
}

}  // namespace

bool is_supported_method(std::string_view name) {
  return in(name, kStringMethods) || in(name, kDictMethods) || name == "cycle";
}

bool has_method(const Value& obj, std::string_view name) {
  if (obj.is_string()) return in(name, kStringMethods);
  if (obj.is_dict()) return in(name, kDictMethods);
  return false;
}

Value call_method(const Value& obj, std::string_view name, const CallArgs& args) {
  if (obj.is_string() && in(name, kStringMethods)) return string_method(obj.as_string(), name, args);
  if (obj.is_dict() && in(name, kDictMethods)) return dict_method(obj, name, args);
  throw TemplateValueError{"'" + obj.type_name() + " object' has no attribute '" + std::string(name) + "'"};
}

}  // namespace fsdp::chat
