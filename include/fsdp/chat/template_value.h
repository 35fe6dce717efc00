// The values a chat template computes with, and the Python semantics Jinja gives them.
//
// Jinja runs on Python objects, and what a template prints is Python's str() of them: 1.0
// prints "1.0", True prints "True", a list prints "['a', 1]", an undefined variable prints
// nothing. Matching transformers byte for byte means matching those rules, so this is a value
// type of our own rather than nlohmann::json, which has none of them: it has no "undefined"
// distinct from null, no tuples, no namespace objects a loop can write through, no callables,
// and its default object sorts its keys (Python dicts keep insertion order, and tojson and
// .items() print in that order).
//
// Lists, tuples and dicts are immutable once built (transformers renders in Jinja's
// ImmutableSandboxedEnvironment, where no template can modify them) and shared by pointer, so a
// copy is cheap. A namespace is the one mutable object: `set ns.x = ...` inside a loop must be
// seen after it. Strings are UTF-8; lengths, indexes and slices count code points as Python does.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace fsdp::chat {

class Value;
struct CallArgs;
using ValueList = std::vector<Value>;
using ValueItems = std::vector<std::pair<Value, Value>>;  // a dict's (key, value) pairs, in order

// A callable: raise_exception, namespace, range, a macro, a bound string method, loop.cycle.
struct Function {
  std::string name;
  std::function<Value(CallArgs&)> call;
};

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Tuple, Dict, Namespace, Object, Function };

  Value() = default;  // undefined
  static Value undefined(std::string hint = {});
  static Value none();
  Value(bool b);
  Value(int v) : Value(int64_t(v)) {}
  Value(int64_t v);
  Value(double v);
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  static Value list(ValueList items);
  static Value tuple(ValueList items);
  static Value dict(ValueItems items);
  static Value make_namespace(std::vector<std::pair<std::string, Value>> attrs);
  // An object with fixed attributes (a for loop's `loop`).
  static Value object(std::string type_name, std::vector<std::pair<std::string, Value>> attrs);
  static Value function(std::string name, std::function<Value(CallArgs&)> fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_tuple() const { return kind_ == Kind::Tuple; }
  bool is_sequence() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Namespace; }
  bool is_object() const { return kind_ == Kind::Object; }
  bool is_function() const { return kind_ == Kind::Function; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::Bool ? int64_t(b_) : i_; }  // bool is an int in Python
  double as_float() const { return kind_ == Kind::Float ? f_ : double(as_int()); }
  const std::string& as_string() const { return *s_; }
  const ValueList& items() const { return *list_; }      // list or tuple
  const ValueItems& dict_items() const { return *dict_; }
  const Function& as_function() const { return *fn_; }
  // Undefined: why ("'x' is undefined", "'dict object' has no attribute 'role'").
  const std::string& undefined_hint() const;

  // Dict lookup by key (Python equality); nullptr when absent.
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  // Namespace and object attributes; nullptr when absent.
  const Value* attribute(std::string_view name) const;
  void set_attribute(const std::string& name, Value v) const;  // namespaces only
  const std::vector<std::pair<std::string, Value>>& attributes() const { return *attrs_; }

  // Python's type name, as its error messages say it: "str", "int", "dict", "NoneType".
  std::string type_name() const;

 private:
  Kind kind_ = Kind::Undefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;  // strings, and an undefined's hint
  std::shared_ptr<const ValueList> list_;
  std::shared_ptr<const ValueItems> dict_;
  std::shared_ptr<std::vector<std::pair<std::string, Value>>> attrs_;  // namespace, object
  std::shared_ptr<const Function> fn_;
};

// The arguments of a call: Python's binding of positional and keyword arguments to parameters.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // Parameter `index` (0-based), passed by position or by `name`; `dflt` when absent.
  Value get(size_t index, std::string_view name, Value dflt = Value()) const;
  // Throws TemplateValueError when more than `max_positional` arguments, or a keyword not in
  // `names`, were passed to `fn`.
  void check(std::string_view fn, size_t max_positional, std::initializer_list<std::string_view> names) const;
};

// Python semantics. Each throws TemplateValueError where Python raises.
struct TemplateValueError {
  std::string message;
};
bool truthy(const Value& v);
std::string to_str(const Value& v);  // str(); an undefined is ""
std::string repr(const Value& v);    // repr(), as str() prints the items of a list or dict
bool equals(const Value& a, const Value& b);
int compare(const Value& a, const Value& b);  // <0, 0, >0 for <, ==, >; TypeError when unordered
std::string python_float_repr(double d);

// Values from JSON (messages, tools, extra variables), keeping object key order: JSON integers
// become int, other numbers float, objects dicts.
Value from_json(const nlohmann::ordered_json& j);
// transformers' tojson filter: json.dumps(x, ensure_ascii, indent, separators, sort_keys).
// `indent` is none, an int or a string; `separators` none or a 2-tuple of strings.
std::string to_json(const Value& v, bool ensure_ascii, const Value& indent, const Value& separators, bool sort_keys);

}  // namespace fsdp::chat
