// Python's arithmetic as Jinja applies it: true division (7 / 2 is 3.5), floor division and a
// modulo that take the divisor's sign, int ** negative int is a float, str * int repeats, and
// an undefined operand is an error (Jinja's Undefined fails every operator).
#include <cmath>
#include <limits>

#include "fsdp/chat/template_builtins.h"

namespace fsdp::chat {

namespace {

[[noreturn]] void unsupported(std::string_view op, const Value& a, const Value& b) {
  throw TemplateValueError{"unsupported operand type(s) for " + std::string(op) + ": '" + a.type_name() + "' and '" +
                           b.type_name() + "'"};
}

[[noreturn]] void overflow() { throw TemplateValueError{"integer overflow (more than 64 bits)"}; }
int64_t add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}
int64_t sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}
int64_t mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

double floor_mod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

Value repeat(const Value& seq, int64_t n, size_t max_size) {
  if (n <= 0) return seq.is_string() ? Value(std::string()) : seq.is_tuple() ? Value::tuple({}) : Value::list({});
  const size_t unit = seq.is_string() ? seq.as_string().size() : seq.items().size();
  if (unit != 0 && uint64_t(n) > max_size / unit) throw TemplateValueError{"the result of '*' is too large"};
  if (seq.is_string()) {
    std::string out;
    out.reserve(unit * size_t(n));
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value(std::move(out));
  }
  ValueList out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

}  // namespace

Value unary_op(std::string_view op, const Value& a) {
  if (a.is_undefined()) fail_undefined(a);
  if (!a.is_number()) throw TemplateValueError{"bad operand type for unary " + std::string(op) + ": '" + a.type_name() + "'"};
  if (op == "+") return a.is_float() ? a : Value(a.as_int());
  if (a.is_float()) return Value(-a.as_float());
  if (a.as_int() == std::numeric_limits<int64_t>::min()) throw TemplateValueError{"integer overflow (more than 64 bits)"};
  return Value(-a.as_int());
}

Value binary_op(std::string_view op, const Value& a, const Value& b, size_t max_size) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  const bool nums = a.is_number() && b.is_number();
  const bool floats = nums && (a.is_float() || b.is_float());
  if (op == "+") {
    if (floats) return Value(a.as_float() + b.as_float());
    if (nums) return Value(add(a.as_int(), b.as_int()));
    if (a.is_string() && b.is_string()) {
      if (a.as_string().size() + b.as_string().size() > max_size) throw TemplateValueError{"the result of '+' is too large"};
      return Value(a.as_string() + b.as_string());
    }
    if ((a.is_list() && b.is_list()) || (a.is_tuple() && b.is_tuple())) {
      ValueList out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      if (out.size() > max_size) throw TemplateValueError{"the result of '+' is too large"};
      return a.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
    unsupported(op, a, b);
  }
  if (op == "-") {
    if (floats) return Value(a.as_float() - b.as_float());
    if (nums) return Value(sub(a.as_int(), b.as_int()));
    unsupported(op, a, b);
  }
  if (op == "*") {
    if (floats) return Value(a.as_float() * b.as_float());
    if (nums) return Value(mul(a.as_int(), b.as_int()));
    if ((a.is_string() || a.is_sequence()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int(), max_size);
    if ((b.is_string() || b.is_sequence()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int(), max_size);
    unsupported(op, a, b);
  }
  if (!nums) unsupported(op, a, b);
  if (op == "/") {
    if (b.as_float() == 0.0) throw TemplateValueError{"division by zero"};
    if (!floats) return Value(double(a.as_int()) / double(b.as_int()));
    return Value(a.as_float() / b.as_float());
  }
  if (op == "//" || op == "%") {
    if (floats) {
      if (b.as_float() == 0.0) throw TemplateValueError{"float floor division by zero"};
      const double m = floor_mod(a.as_float(), b.as_float());
      return op == "%" ? Value(m) : Value(std::round((a.as_float() - m) / b.as_float()));
    }
    const int64_t x = a.as_int(), y = b.as_int();
    if (y == 0) throw TemplateValueError{op == "%" ? "integer modulo by zero" : "integer division or modulo by zero"};
    if (x == std::numeric_limits<int64_t>::min() && y == -1) {
      if (op == "%") return Value(int64_t(0));
      throw TemplateValueError{"integer overflow (more than 64 bits)"};
    }
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) {
      m += y;
      q -= 1;
    }
    return op == "%" ? Value(m) : Value(q);
  }
  if (op == "**") {
    if (floats || b.as_int() < 0) {
      if (a.as_float() == 0.0 && b.as_float() < 0) throw TemplateValueError{"0.0 cannot be raised to a negative power"};
      return Value(std::pow(a.as_float(), b.as_float()));
    }
    int64_t base = a.as_int(), e = b.as_int(), out = 1;
    while (e > 0) {
      if (e & 1) out = mul(out, base);
      e >>= 1;
      if (e > 0) base = mul(base, base);
    }
    return Value(out);
  }
  throw TemplateValueError{"operator '" + std::string(op) + "' is not supported"};
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) throw TemplateValueError{"'in <string>' requires string as left operand, not " + item.type_name()};
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_dict()) return container.find(item) != nullptr;
  if (container.is_sequence()) {
    for (const auto& e : container.items())
      if (equals(e, item)) return true;
    return false;
  }
  if (container.is_undefined()) return false;  // iterating an undefined finds nothing
  throw TemplateValueError{"argument of type '" + container.type_name() + "' is not iterable"};
}

}  // namespace fsdp::chat
