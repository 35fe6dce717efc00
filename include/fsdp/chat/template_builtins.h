// The filters, tests and methods chat templates call, with Jinja's and Python's semantics
// (docs/chat-templates.md lists them). Each throws TemplateValueError where Jinja fails; the
// evaluator adds the line and column.
#pragma once

#include <string_view>

#include "fsdp/chat/template_value.h"

namespace fsdp::chat {

// `operand | name(args)`.
Value apply_filter(std::string_view name, const Value& operand, const CallArgs& args);
// `operand is name(args)`.
bool apply_test(std::string_view name, const Value& operand, const CallArgs& args);
// `obj.name(args)`: a method of a string or a dict. has_method says whether `obj` has one of
// that name (a dict's `items` is its method, not its "items" key, as in Python).
bool has_method(const Value& obj, std::string_view name);
Value call_method(const Value& obj, std::string_view name, const CallArgs& args);

// Python's iteration: a list's items, a string's characters, a dict's keys; an undefined
// value is empty. Anything else is not iterable.
ValueList iterate(const Value& v);
// Jinja's `obj[key]` (environment.getitem) and `obj.name` (environment.getattr): a missing
// key or index gives an undefined value that says why; an undefined obj fails.
Value get_item(const Value& obj, const Value& key);
Value get_attr(const Value& obj, const std::string& name);
// Python's operators: + - * / // % ** on numbers, strings and lists (ints are 64-bit here, and
// overflow is an error, never a wrapped value), unary - +, and `item in container`.
// `max_size` bounds a string or list a `*` or `+` builds.
Value binary_op(std::string_view op, const Value& a, const Value& b, size_t max_size);
Value unary_op(std::string_view op, const Value& a);
bool contains(const Value& container, const Value& item);
// The error for using an undefined value (its hint: "'x' is undefined").
[[noreturn]] void fail_undefined(const Value& v);

}  // namespace fsdp::chat
