// The recursive-descent parser behind parse_template (fsdp/chat/template_parser.h), shared by
// its two grammars: the statement (tag) grammar in template_parser.cpp and the expression
// grammar in template_expressions.cpp. The token cursor and its error helpers live here, inline,
// because both grammars read tokens the same way; the statement-only state (loop depth, open
// tags) is here only because a class cannot be split across files any other way.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fsdp/chat/template_ast.h"
#include "fsdp/chat/template_error.h"
#include "fsdp/chat/template_lexer.h"

namespace fsdp::chat::detail {

class Parser {
 public:
  Parser(std::vector<Token> tokens, std::string origin) : t_(std::move(tokens)), origin_(std::move(origin)) {}

  Body parse_all() {
    Body body = subparse({});
    return body;
  }

 private:
  // ---- the token stream ----
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  const Token& next() {
    const Token& t = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return t;
  }
  bool is_op(std::string_view op) const { return cur().type == TokenType::Operator && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == TokenType::Name && cur().text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail(SourcePos pos, const std::string& msg) const { throw TemplateError(origin_, pos, msg); }
  [[noreturn]] void fail_here(const std::string& msg) const { fail(cur().pos, msg); }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail_here("expected '" + std::string(op) + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != TokenType::Name) fail_here("expected a name, got " + describe(cur()));
    return next().text;
  }
  void expect(TokenType type, const char* what) {
    if (cur().type != type) fail_here(std::string("expected ") + what + ", got " + describe(cur()));
    next();
  }

  // ---- statements (template_parser.cpp) ----
  Body subparse(std::initializer_list<std::string_view> end_names);
  std::string parse_block(Body& body, std::initializer_list<std::string_view> ends);
  void end_tag();
  StmtPtr parse_statement();
  std::vector<std::string> parse_targets();

  // ---- expressions (template_expressions.cpp) ----
  static ExprPtr node(ExprKind kind, SourcePos pos);
  bool is_tuple_end(std::initializer_list<std::string_view> end_names) const;
  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> end_names,
                      bool explicit_parentheses = false);
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr parse_condexpr();
  ExprPtr binary(std::string op, ExprPtr l, ExprPtr r, SourcePos pos);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_subscribed();
  void parse_call_args(Expr& e);
  ExprPtr parse_call(ExprPtr callee);
  ExprPtr parse_filter(ExprPtr operand, bool start_inline);
  ExprPtr parse_test(ExprPtr operand);
  ExprPtr parse_filter_expr(ExprPtr e);

  std::vector<Token> t_;
  size_t i_ = 0;
  std::string origin_;
  int loop_depth_ = 0;
  std::vector<SourcePos> open_;  // the tags whose blocks are open, for "never closed" messages
  int expr_nesting_ = 0;         // parse_unary's recursion (operators, brackets, literals)
};

}  // namespace fsdp::chat::detail
