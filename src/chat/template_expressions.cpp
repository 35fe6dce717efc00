// The expression grammar of chat templates, with Jinja's precedence (fsdp/chat/template_parser.h
// lists it): each level a function that calls the next tighter one, from tuples and conditional
// expressions down to literals, then postfix `.x`, `[i]`, `[a:b:c]` and calls, then filters and
// tests. A filter, test or method this interpreter does not implement is refused here.
#include <string>
#include <utility>
#include <vector>

#include "fsdp/chat/template_ast.h"
#include "fsdp/chat/template_lexer.h"
#include "fsdp/chat/template_parser.h"
#include "template_parser_impl.h"

namespace fsdp::chat::detail {

ExprPtr Parser::node(ExprKind kind, SourcePos pos) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  return e;
}

bool Parser::is_tuple_end(std::initializer_list<std::string_view> end_names) const {
  if (cur().type == TokenType::VarEnd || cur().type == TokenType::BlockEnd || cur().type == TokenType::End) return true;
  if (is_op(")")) return true;
  if (cur().type == TokenType::Name)
    for (auto n : end_names)
      if (cur().text == n) return true;
  return false;
}

ExprPtr Parser::parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> end_names,
                            bool explicit_parentheses) {
  const SourcePos pos = cur().pos;
  std::vector<ExprPtr> args;
  bool is_tuple = false;
  while (true) {
    if (!args.empty()) expect_op(",");
    if (is_tuple_end(end_names)) break;
    args.push_back(with_condexpr ? parse_expression(true) : parse_or());
    if (is_op(",")) is_tuple = true;
    else break;
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parentheses) fail_here("expected an expression, got " + describe(cur()));
  }
  auto e = node(ExprKind::Tuple, pos);
  e->args = std::move(args);
  return e;
}

ExprPtr Parser::parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

ExprPtr Parser::parse_condexpr() {
  ExprPtr expr = parse_or();
  while (is_name("if")) {
    const SourcePos pos = next().pos;
    auto e = node(ExprKind::CondExpr, pos);
    e->args.push_back(parse_or());
    e->args.push_back(std::move(expr));
    e->args.push_back(skip_name("else") ? parse_condexpr() : nullptr);
    expr = std::move(e);
  }
  return expr;
}

ExprPtr Parser::binary(std::string op, ExprPtr l, ExprPtr r, SourcePos pos) {
  auto e = node(ExprKind::Binary, pos);
  e->op = std::move(op);
  e->args.push_back(std::move(l));
  e->args.push_back(std::move(r));
  return e;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name("or")) {
    const SourcePos pos = next().pos;
    left = binary("or", std::move(left), parse_and(), pos);
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name("and")) {
    const SourcePos pos = next().pos;
    left = binary("and", std::move(left), parse_not(), pos);
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    const SourcePos pos = next().pos;
    auto e = node(ExprKind::Unary, pos);
    e->op = "not";
    e->args.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const SourcePos pos = cur().pos;
  ExprPtr first = parse_math1();
  ExprPtr cmp;
  while (true) {
    std::string op;
    if (cur().type == TokenType::Operator &&
        (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" || cur().text == ">" ||
         cur().text == ">=")) {
      op = next().text;
    } else if (is_name("in")) {
      next();
      op = "in";
    } else if (is_name("not") && peek().type == TokenType::Name && peek().text == "in") {
      next();
      next();
      op = "notin";
    } else {
      break;
    }
    if (!cmp) {
      cmp = node(ExprKind::Compare, pos);
      cmp->args.push_back(std::move(first));
    }
    cmp->ops.push_back(op);
    cmp->args.push_back(parse_math1());
  }
  return cmp ? std::move(cmp) : std::move(first);
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    const Token& t = next();
    left = binary(t.text, std::move(left), parse_concat(), t.pos);
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  ExprPtr left = parse_math2();
  while (is_op("~")) {
    const SourcePos pos = next().pos;
    left = binary("~", std::move(left), parse_math2(), pos);
  }
  return left;
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& t = next();
    left = binary(t.text, std::move(left), parse_pow(), t.pos);
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (is_op("**")) {  // left-associative in Jinja (2 ** 3 ** 2 is 64)
    const SourcePos pos = next().pos;
    left = binary("**", std::move(left), parse_unary(true), pos);
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  // Every nested expression passes here (a sign, brackets, a literal's items).
  if (++expr_nesting_ > kMaxTemplateNesting)
    fail_here(nesting_message("the expression nests", kMaxTemplateNesting));
  struct Leave {
    int& n;
    ~Leave() { --n; }
  } leave{expr_nesting_};
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    const Token& t = next();
    e = node(ExprKind::Unary, t.pos);
    e->op = t.text;
    e->args.push_back(parse_unary(false));
  } else {
    e = parse_primary();
  }
  e = parse_postfix(std::move(e));
  if (with_filter) e = parse_filter_expr(std::move(e));
  return e;
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  const SourcePos pos = t.pos;
  if (t.type == TokenType::Name) {
    next();
    auto e = node(ExprKind::Const, pos);
    if (t.text == "true" || t.text == "True") e->value = Value(true);
    else if (t.text == "false" || t.text == "False") e->value = Value(false);
    else if (t.text == "none" || t.text == "None") e->value = Value::none();
    else {
      e->kind = ExprKind::Name;
      e->name = t.text;
    }
    return e;
  }
  if (t.type == TokenType::String) {
    std::string s;
    while (cur().type == TokenType::String) s += next().text;  // adjacent literals join
    auto e = node(ExprKind::Const, pos);
    e->value = Value(std::move(s));
    return e;
  }
  if (t.type == TokenType::Integer || t.type == TokenType::Float) {
    next();
    auto e = node(ExprKind::Const, pos);
    e->value = t.type == TokenType::Integer ? Value(t.int_value) : Value(t.float_value);
    return e;
  }
  if (is_op("(")) {
    next();
    ExprPtr e = parse_tuple(true, {}, true);
    expect_op(")");
    return e;
  }
  if (is_op("[")) {
    next();
    auto e = node(ExprKind::List, pos);
    while (!is_op("]")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("]")) break;
      e->args.push_back(parse_expression(true));
    }
    expect_op("]");
    return e;
  }
  if (is_op("{")) {
    next();
    auto e = node(ExprKind::Dict, pos);
    while (!is_op("}")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("}")) break;
      e->args.push_back(parse_expression(true));
      expect_op(":");
      e->args.push_back(parse_expression(true));
    }
    expect_op("}");
    return e;
  }
  fail(pos, "unexpected " + describe(t));
}

ExprPtr Parser::parse_postfix(ExprPtr e) {
  while (true) {
    if (is_op(".")) {
      next();
      const SourcePos pos = cur().pos;  // errors point at the attribute's name
      if (cur().type == TokenType::Name) {
        auto a = node(ExprKind::GetAttr, pos);
        a->name = next().text;
        a->args.push_back(std::move(e));
        e = std::move(a);
      } else if (cur().type == TokenType::Integer) {
        auto a = node(ExprKind::GetItem, pos);
        auto idx = node(ExprKind::Const, cur().pos);
        idx->value = Value(next().int_value);
        a->args.push_back(std::move(e));
        a->args.push_back(std::move(idx));
        e = std::move(a);
      } else {
        fail_here("expected an attribute name after '.', got " + describe(cur()));
      }
    } else if (is_op("[")) {
      const SourcePos pos = next().pos;
      std::vector<ExprPtr> subs;
      while (!is_op("]")) {
        if (!subs.empty()) expect_op(",");
        subs.push_back(parse_subscribed());
      }
      expect_op("]");
      if (subs.empty()) fail(pos, "expected a subscript");
      // x[1, :] would index with a tuple holding a slice object (numpy's idiom, not a chat
      // template's); the slice node has no object to slice there (found by fuzz_chat_template).
      for (const auto& sub : subs)
        if (subs.size() > 1 && sub->kind == ExprKind::Slice)
          fail(sub->pos, "a slice among several subscripts ([a, b:c]) is not supported");
      if (subs.size() == 1 && subs[0]->kind == ExprKind::Slice) {
        subs[0]->args[0] = std::move(e);
        e = std::move(subs[0]);
      } else {
        auto a = node(ExprKind::GetItem, pos);
        a->args.push_back(std::move(e));
        if (subs.size() == 1) {
          a->args.push_back(std::move(subs[0]));
        } else {
          auto tup = node(ExprKind::Tuple, pos);
          tup->args = std::move(subs);
          a->args.push_back(std::move(tup));
        }
        e = std::move(a);
      }
    } else if (is_op("(")) {
      if (e->kind == ExprKind::GetAttr && !is_supported_method(e->name))
        fail(e->pos, "method '" + e->name + "' is not supported");
      e = parse_call(std::move(e));
    } else {
      return e;
    }
  }
}

ExprPtr Parser::parse_subscribed() {
  const SourcePos pos = cur().pos;
  ExprPtr start;
  if (!is_op(":")) {
    start = parse_expression(true);
    if (!is_op(":")) return start;
  }
  next();  // ':'
  auto s = node(ExprKind::Slice, pos);
  s->args.push_back(nullptr);  // the sliced object, filled in by the caller
  s->args.push_back(std::move(start));
  s->args.push_back(is_op("]") || is_op(",") || is_op(":") ? nullptr : parse_expression(true));
  if (skip_op(":")) s->args.push_back(is_op("]") || is_op(",") ? nullptr : parse_expression(true));
  else s->args.push_back(nullptr);
  return s;
}

void Parser::parse_call_args(Expr& e) {
  expect_op("(");
  bool first = true;
  while (!is_op(")")) {
    if (!first) expect_op(",");
    first = false;
    if (is_op(")")) break;
    if (is_op("*") || is_op("**")) fail_here("*args and **kwargs in calls are not supported");
    if (cur().type == TokenType::Name && peek().type == TokenType::Operator && peek().text == "=") {
      std::string key = next().text;
      next();
      e.kwargs.emplace_back(std::move(key), parse_expression(true));
    } else {
      if (!e.kwargs.empty()) fail_here("a positional argument follows a keyword argument");
      e.args.push_back(parse_expression(true));
    }
  }
  expect_op(")");
}

ExprPtr Parser::parse_call(ExprPtr callee) {
  auto e = node(ExprKind::Call, callee->pos);  // errors point at what is called
  e->args.push_back(std::move(callee));
  parse_call_args(*e);
  return e;
}

ExprPtr Parser::parse_filter(ExprPtr operand, bool start_inline) {
  while (is_op("|") || start_inline) {
    if (!start_inline) next();
    start_inline = false;
    const SourcePos pos = cur().pos;
    std::string name = expect_name();
    while (skip_op(".")) name += "." + expect_name();
    if (!is_supported_filter(name)) fail(pos, "filter '" + name + "' is not supported");
    auto f = node(ExprKind::Filter, pos);
    f->name = std::move(name);
    f->args.push_back(std::move(operand));
    if (is_op("(")) parse_call_args(*f);
    operand = std::move(f);
  }
  return operand;
}

ExprPtr Parser::parse_test(ExprPtr operand) {
  next();  // 'is'
  const bool negated = skip_name("not");
  const SourcePos pos = cur().pos;
  std::string name = expect_name();
  while (skip_op(".")) name += "." + expect_name();
  if (!is_supported_test(name)) fail(pos, "test '" + name + "' is not supported");
  auto t = node(ExprKind::Test, pos);
  t->name = std::move(name);
  t->negated = negated;
  t->args.push_back(std::move(operand));
  if (is_op("(")) {
    parse_call_args(*t);
  } else if ((cur().type == TokenType::Name || cur().type == TokenType::String || cur().type == TokenType::Integer ||
              cur().type == TokenType::Float || is_op("(") || is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail_here("tests cannot be chained with 'is'");
    t->args.push_back(parse_postfix(parse_primary()));  // `x is divisibleby 3`
  }
  return t;
}

ExprPtr Parser::parse_filter_expr(ExprPtr e) {
  while (true) {
    if (is_op("|")) e = parse_filter(std::move(e), false);
    else if (is_name("is")) e = parse_test(std::move(e));
    else if (is_op("(")) e = parse_call(std::move(e));
    else return e;
  }
}

}  // namespace fsdp::chat::detail
