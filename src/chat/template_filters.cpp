// Jinja's filters and tests as chat templates use them, with transformers' own tojson (Python's
// json.dumps with ensure_ascii=False, not Jinja's HTML-escaping one).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "fsdp/chat/python_string.h"
#include "fsdp/chat/template_builtins.h"
#include "fsdp/chat/template_parser.h"

namespace fsdp::chat {

namespace {

constexpr std::string_view kFilters[] = {
    "abs",   "capitalize", "count",  "d",       "default", "first",     "float",  "int",    "items",
    "join",  "last",       "length", "list",    "lower",   "map",       "reject", "rejectattr", "replace",
    "reverse", "safe",     "select", "selectattr", "string", "sum",     "title",  "tojson", "trim",
    "upper"};
constexpr std::string_view kTests[] = {
    "defined", "undefined", "none", "string", "mapping", "iterable", "sequence", "number", "integer", "float",
    "boolean", "true", "false", "even", "odd", "divisibleby", "eq", "equalto", "==", "ne", "!=", "lt", "<",
    "le", "<=", "gt", ">", "ge", ">=", "in", "lower", "upper", "sameas", "callable"};

template <class Names>
bool contains(const Names& names, std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: return int64_t(py::length(v.as_string()));
    case Value::Kind::List:
    case Value::Kind::Tuple: return int64_t(v.items().size());
    case Value::Kind::Dict: return int64_t(v.dict_items().size());
    default: throw TemplateValueError{"object of type '" + v.type_name() + "' has no len()"};
  }
}

// Python's float(str): surrounding whitespace allowed, underscores between digits, inf and nan.
std::optional<double> parse_float(std::string s) {
  s = py::strip(s, std::nullopt, true, true);
  std::string t;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
        std::isdigit(static_cast<unsigned char>(s[i + 1])))
      continue;
    t += s[i];
  }
  if (t.empty() || t.find_first_of("xXpP") != std::string::npos) return std::nullopt;  // strtod reads hex, Python not
  errno = 0;
  char* end = nullptr;
  const double d = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return d;
}

std::optional<int64_t> parse_int(std::string s, int base) {
  s = py::strip(s, std::nullopt, true, true);
  std::string t;
  for (size_t i = 0; i < s.size(); ++i)
    if (!(s[i] == '_' && i > 0 && i + 1 < s.size())) t += s[i];
  if (t.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(t.c_str(), &end, base);
  if (end != t.c_str() + t.size() || errno == ERANGE) return std::nullopt;
  return v;
}

// Jinja's title filter (not str.title): a word starts after '-', whitespace, or an opening bracket.
std::string jinja_title(const std::string& s) {
  std::string out;
  bool word_start = true;
  const auto cps = py::decode(s);
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py::is_space(c);
    std::string ch;
    py::append_utf8(ch, c);
    out += sep ? ch : word_start ? py::upper(ch) : py::lower(ch);
    word_start = sep;
  }
  return out;
}

// The attribute a filter reads from each item: "a.b" and integer parts, as Jinja's attrgetter.
Value attribute_of(const Value& item, const Value& attribute) {
  if (attribute.is_int()) return get_item(item, attribute);
  Value v = item;
  std::string path = to_str(attribute);
  size_t pos = 0;
  while (true) {
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    const auto as_int = parse_int(part, 10);
    v = get_item(v, as_int && !part.empty() && std::isdigit(static_cast<unsigned char>(part[0])) ? Value(*as_int)
                                                                                                  : Value(part));
    if (dot == std::string::npos) return v;
    pos = dot + 1;
  }
}

// select/reject(test, args...) and selectattr/rejectattr(attribute, test, args...).
Value select(const Value& seq, const CallArgs& args, bool by_attribute, bool keep) {
  size_t at = 0;
  Value attribute;
  if (by_attribute) {
    if (args.positional.empty()) throw TemplateValueError{"Missing parameter for attribute name"};
    attribute = args.positional[at++];
  }
  std::string test;
  CallArgs test_args;
  if (at < args.positional.size()) {
    test = to_str(args.positional[at++]);
    if (!is_supported_test(test)) throw TemplateValueError{"test '" + test + "' is not supported"};
    test_args.positional.assign(args.positional.begin() + std::ptrdiff_t(at), args.positional.end());
    test_args.keyword = args.keyword;
  }
  ValueList out;
  for (const auto& item : iterate(seq)) {
    const Value v = by_attribute ? attribute_of(item, attribute) : item;
    const bool pass = test.empty() ? truthy(v) : apply_test(test, v, test_args);
    if (pass == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value map_filter(const Value& seq, const CallArgs& args) {
  ValueList out;
  if (args.positional.empty()) {
    const Value attribute = args.get(99, "attribute");
    if (attribute.is_undefined()) throw TemplateValueError{"map() needs a filter name or attribute="};
    const Value dflt = args.get(99, "default");
    for (const auto& item : iterate(seq)) {
      Value v = attribute_of(item, attribute);
      out.push_back(v.is_undefined() && !dflt.is_undefined() ? dflt : v);
    }
  } else {
    const std::string name = to_str(args.positional[0]);
    if (!is_supported_filter(name)) throw TemplateValueError{"filter '" + name + "' is not supported"};
    CallArgs rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keyword = args.keyword;
    for (const auto& item : iterate(seq)) out.push_back(apply_filter(name, item, rest));
  }
  return Value::list(std::move(out));
}

}  // namespace

bool is_supported_filter(std::string_view name) { return contains(kFilters, name); }
bool is_supported_test(std::string_view name) { return contains(kTests, name); }

Value apply_filter(std::string_view name, const Value& v, const CallArgs& a) {
  if (name == "tojson") {
    a.check(name, 4, {"ensure_ascii", "indent", "separators", "sort_keys"});
    return Value(to_json(v, truthy(a.get(0, "ensure_ascii", Value(false))), a.get(1, "indent", Value::none()),
                         a.get(2, "separators", Value::none()), truthy(a.get(3, "sort_keys", Value(false)))));
  }
  if (name == "trim") {
    a.check(name, 1, {"chars"});
    const Value chars = a.get(0, "chars", Value::none());
    return Value(py::strip(to_str(v), chars.is_none() || chars.is_undefined() ? std::nullopt
                                                                                : std::optional(to_str(chars)),
                           true, true));
  }
  if (name == "length" || name == "count") {
    a.check(name, 0, {});
    return Value(length_of(v));
  }
  if (name == "default" || name == "d") {
    a.check(name, 2, {"default_value", "boolean"});
    const bool boolean = truthy(a.get(1, "boolean", Value(false)));
    if (v.is_undefined() || (boolean && !truthy(v))) return a.get(0, "default_value", Value(""));
    return v;
  }
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
    a.check(name, 0, {});
    const std::string s = to_str(v);
    if (name == "upper") return Value(py::upper(s));
    if (name == "lower") return Value(py::lower(s));
    if (name == "capitalize") return Value(py::capitalize(s));
    return Value(jinja_title(s));
  }
  if (name == "first" || name == "last") {
    a.check(name, 0, {});
    const ValueList items = iterate(v);
    if (items.empty()) return Value::undefined(std::string("No ") + std::string(name) + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    a.check(name, 2, {"d", "attribute"});
    const std::string sep = to_str(a.get(0, "d", Value("")));
    const Value attribute = a.get(1, "attribute", Value::none());
    std::string out;
    bool first = true;
    for (const auto& item : iterate(v)) {
      if (!first) out += sep;
      first = false;
      out += to_str(attribute.is_none() ? item : attribute_of(item, attribute));
    }
    return Value(std::move(out));
  }
  if (name == "list") {
    a.check(name, 0, {});
    return Value::list(iterate(v));
  }
  if (name == "items") {
    a.check(name, 0, {});
    if (v.is_undefined()) return Value::list({});
    if (!v.is_dict()) throw TemplateValueError{"Can only get item pairs from a mapping."};
    ValueList out;
    for (const auto& [k, e] : v.dict_items()) out.push_back(Value::tuple({k, e}));
    return Value::list(std::move(out));
  }
  if (name == "string") {
    a.check(name, 0, {});
    return Value(to_str(v));
  }
  if (name == "safe") {
    a.check(name, 0, {});
    return v;
  }
  if (name == "int") {
    a.check(name, 2, {"default", "base"});
    const Value dflt = a.get(0, "default", Value(int64_t(0)));
    if (v.is_int() || v.is_bool()) return Value(v.as_int());
    if (v.is_float()) return std::isfinite(v.as_float()) ? Value(int64_t(std::trunc(v.as_float()))) : dflt;
    if (v.is_string()) {
      const Value base = a.get(1, "base", Value(int64_t(10)));
      if (auto i = parse_int(v.as_string(), int(base.as_int()))) return Value(*i);
      if (auto f = parse_float(v.as_string()); f && std::isfinite(*f)) return Value(int64_t(std::trunc(*f)));
    }
    if (v.is_undefined()) fail_undefined(v);
    return dflt;
  }
  if (name == "float") {
    a.check(name, 1, {"default"});
    if (v.is_number()) return Value(v.as_float());
    if (v.is_string())
      if (auto f = parse_float(v.as_string())) return Value(*f);
    if (v.is_undefined()) fail_undefined(v);
    return a.get(0, "default", Value(0.0));
  }
  if (name == "abs") {
    a.check(name, 0, {});
    if (v.is_float()) return Value(std::fabs(v.as_float()));
    if (v.is_int() || v.is_bool()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
    throw TemplateValueError{"bad operand type for abs(): '" + v.type_name() + "'"};
  }
  if (name == "replace") {
    a.check(name, 3, {"old", "new", "count"});
    const Value count = a.get(2, "count", Value::none());
    return Value(py::replace(to_str(v), to_str(a.get(0, "old", Value(""))), to_str(a.get(1, "new", Value(""))),
                             count.is_none() ? -1 : count.as_int()));
  }
  if (name == "reverse") {
    a.check(name, 0, {});
    if (v.is_string()) {
      auto cps = py::decode(v.as_string());
      std::reverse(cps.begin(), cps.end());
      return Value(py::encode(cps));
    }
    ValueList items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "sum") {
    a.check(name, 2, {"attribute", "start"});
    const Value attribute = a.get(0, "attribute", Value::none());
    Value total = a.get(1, "start", Value(int64_t(0)));
    for (const auto& item : iterate(v)) {
      const Value x = attribute.is_none() ? item : attribute_of(item, attribute);
      if (!x.is_number() || !total.is_number())
        throw TemplateValueError{"unsupported operand type(s) for +: '" + total.type_name() + "' and '" + x.type_name() + "'"};
      total = (x.is_float() || total.is_float()) ? Value(total.as_float() + x.as_float()) : Value(total.as_int() + x.as_int());
    }
    return total;
  }
  if (name == "select" || name == "reject") return select(v, a, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") return select(v, a, true, name == "selectattr");
  if (name == "map") return map_filter(v, a);
  throw TemplateValueError{"filter '" + std::string(name) + "' is not supported"};
}

bool apply_test(std::string_view name, const Value& v, const CallArgs& a) {
  const Value arg = a.get(0, "");
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable")
    return v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined();
  if (name == "sequence") return v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "callable") return v.is_function();
  if (name == "lower") return py::is_lower(to_str(v));
  if (name == "upper") return py::is_upper(to_str(v));
  if (name == "even" || name == "odd" || name == "divisibleby") {
    if (v.is_undefined()) fail_undefined(v);
    if (!(v.is_int() || v.is_bool())) throw TemplateValueError{"'" + v.type_name() + "' is not an integer"};
    const int64_t d = name == "divisibleby" ? arg.as_int() : 2;
    if (d == 0) throw TemplateValueError{"integer division or modulo by zero"};
    const int64_t r = ((v.as_int() % d) + d) % d;
    return name == "odd" ? r == 1 : r == 0;
  }
  if (name == "sameas") {
    if (v.kind() != arg.kind()) return false;
    if (v.is_none() || v.is_undefined()) return true;
    if (v.is_bool()) return v.as_bool() == arg.as_bool();
    return false;  // identity of other objects is not observable here
  }
  if (name == "in") {
    if (arg.is_string()) {
      if (!v.is_string()) throw TemplateValueError{"'in <string>' requires string as left operand"};
      return arg.as_string().find(v.as_string()) != std::string::npos;
    }
    if (arg.is_dict()) return arg.find(v) != nullptr;
    for (const auto& item : iterate(arg))
      if (equals(item, v)) return true;
    return false;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, arg);
  if (name == "ne" || name == "!=") return !equals(v, arg);
  if (v.is_undefined()) fail_undefined(v);
  if (arg.is_undefined()) fail_undefined(arg);
  if (name == "lt" || name == "<") return compare(v, arg) < 0;
  if (name == "le" || name == "<=") return compare(v, arg) <= 0;
  if (name == "gt" || name == ">") return compare(v, arg) > 0;
  if (name == "ge" || name == ">=") return compare(v, arg) >= 0;
  throw TemplateValueError{"test '" + std::string(name) + "' is not supported"};
}

}  // namespace fsdp::chat
