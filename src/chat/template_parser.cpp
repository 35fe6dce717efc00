#include "fsdp/chat/template_parser.h"

#include <algorithm>
#include <initializer_list>

#include "fsdp/chat/template_lexer.h"

namespace fsdp::chat {

namespace {

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

  static ExprPtr node(ExprKind kind, SourcePos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }

  // ---- statements ----
  // Statements until a block whose tag is one of `end_names` (left unconsumed, after its '{%').
  Body subparse(std::initializer_list<std::string_view> end_names) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::End) {
        if (end_names.size() != 0) {
          std::string want;
          for (auto n : end_names) want += (want.empty() ? "'" : " or '") + std::string(n) + "'";
          fail(t.pos, "unexpected end of template: the block opened at " + std::to_string(open_.back().line) + ":" +
                          std::to_string(open_.back().col) + " needs " + want);
        }
        return body;
      }
      if (t.type == TokenType::Data) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::Data;
        s->pos = t.pos;
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == TokenType::VarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::Output;
        s->pos = cur().pos;
        s->expr = parse_tuple(true, {});
        expect(TokenType::VarEnd, "end of print statement ('}}')");
        body.push_back(std::move(s));
      } else if (t.type == TokenType::BlockBegin) {
        next();
        if (cur().type == TokenType::Name)
          for (auto n : end_names)
            if (cur().text == n) return body;
        body.push_back(parse_statement());
      } else {
        fail(t.pos, "unexpected " + describe(t));
      }
    }
  }

  // After `{% name`: the rest of the opening tag, the body up to one of `ends`, and the end tag
  // name (consumed); returns which end was found.
  std::string parse_block(Body& body, std::initializer_list<std::string_view> ends) {
    expect(TokenType::BlockEnd, "end of statement block ('%}')");
    body = subparse(ends);
    return next().text;
  }

  void end_tag() { expect(TokenType::BlockEnd, "end of statement block ('%}')"); }

  StmtPtr parse_statement() {
    const Token& t = cur();
    if (t.type != TokenType::Name) fail(t.pos, "expected a tag name, got " + describe(t));
    const std::string tag = t.text;
    const SourcePos pos = t.pos;
    next();
    auto s = std::make_unique<Stmt>();
    s->pos = pos;
    open_.push_back(pos);
    if (tag == "if") {
      s->kind = StmtKind::If;
      while (true) {
        ExprPtr cond = parse_tuple(false, {});
        Body body;
        const std::string end = parse_block(body, {"elif", "else", "endif"});
        s->branches.emplace_back(std::move(cond), std::move(body));
        if (end == "elif") continue;
        if (end == "else") parse_block(s->else_body, {"endif"});
        break;
      }
      end_tag();
    } else if (tag == "for") {
      s->kind = StmtKind::For;
      s->targets = parse_targets();
      if (!skip_name("in")) fail_here("expected 'in', got " + describe(cur()));
      s->expr = parse_tuple(false, {"recursive", "if"});
      if (skip_name("if")) s->cond = parse_expression(true);
      if (is_name("recursive")) fail_here("recursive loops are not supported");
      ++loop_depth_;
      const std::string end = parse_block(s->body, {"endfor", "else"});
      --loop_depth_;
      if (end == "else") parse_block(s->else_body, {"endfor"});
      end_tag();
    } else if (tag == "set") {
      if (cur().type == TokenType::Name && peek().type == TokenType::Operator && peek().text == "." &&
          peek(2).type == TokenType::Name) {
        s->targets = {next().text};
        next();
        s->attr = next().text;
      } else {
        s->targets = parse_targets();
      }
      if (skip_op("=")) {
        s->kind = StmtKind::Set;
        s->expr = parse_tuple(true, {});
        end_tag();
      } else {
        if (!s->attr.empty() || s->targets.size() != 1) fail_here("a block set assigns one name");
        if (is_op("|")) fail_here("filters on a block set are not supported");
        s->kind = StmtKind::SetBlock;
        parse_block(s->body, {"endset"});
        end_tag();
      }
    } else if (tag == "macro") {
      s->kind = StmtKind::Macro;
      s->name = expect_name();
      expect_op("(");
      while (!is_op(")")) {
        if (!s->params.empty()) expect_op(",");
        if (is_op(")")) break;
        std::string param = expect_name();
        ExprPtr dflt;
        if (skip_op("=")) dflt = parse_expression(true);
        s->params.emplace_back(std::move(param), std::move(dflt));
      }
      expect_op(")");
      const int saved = loop_depth_;
      loop_depth_ = 0;
      parse_block(s->body, {"endmacro"});
      loop_depth_ = saved;
      if (cur().type == TokenType::Name) next();  // {% endmacro name %}
      end_tag();
    } else if (tag == "filter") {
      s->kind = StmtKind::FilterBlock;
      s->expr = parse_filter(nullptr, true);
      parse_block(s->body, {"endfilter"});
      end_tag();
    } else if (tag == "generation") {
      s->kind = StmtKind::Generation;
      parse_block(s->body, {"endgeneration"});
      end_tag();
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail(pos, "'" + tag + "' outside of a loop");
      s->kind = tag == "break" ? StmtKind::Break : StmtKind::Continue;
      end_tag();
    } else if (tag.rfind("end", 0) == 0 || tag == "elif" || tag == "else") {
      fail(pos, "unexpected '" + tag + "': no block is open that it could close");
    } else {
      fail(pos, "tag '" + tag + "' is not supported");
    }
    open_.pop_back();
    return s;
  }

  // `x`, `a, b`, `(a, b)`: the names a for loop or a set binds.
  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    const bool paren = skip_op("(");
    do {
      if (cur().type != TokenType::Name) fail_here("expected a name to assign to, got " + describe(cur()));
      names.push_back(next().text);
    } while (skip_op(",") && cur().type == TokenType::Name);
    if (paren) expect_op(")");
    return names;
  }

  // ---- expressions ----
  bool is_tuple_end(std::initializer_list<std::string_view> end_names) const {
    if (cur().type == TokenType::VarEnd || cur().type == TokenType::BlockEnd || cur().type == TokenType::End) return true;
    if (is_op(")")) return true;
    if (cur().type == TokenType::Name)
      for (auto n : end_names)
        if (cur().text == n) return true;
    return false;
  }

  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> end_names,
                      bool explicit_parentheses = false) {
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

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
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

  ExprPtr binary(std::string op, ExprPtr l, ExprPtr r, SourcePos pos) {
    auto e = node(ExprKind::Binary, pos);
    e->op = std::move(op);
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const SourcePos pos = next().pos;
      left = binary("or", std::move(left), parse_and(), pos);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const SourcePos pos = next().pos;
      left = binary("and", std::move(left), parse_not(), pos);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      const SourcePos pos = next().pos;
      auto e = node(ExprKind::Unary, pos);
      e->op = "not";
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
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

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      left = binary(t.text, std::move(left), parse_concat(), t.pos);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const SourcePos pos = next().pos;
      left = binary("~", std::move(left), parse_math2(), pos);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      left = binary(t.text, std::move(left), parse_pow(), t.pos);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {  // left-associative in Jinja (2 ** 3 ** 2 is 64)
      const SourcePos pos = next().pos;
      left = binary("**", std::move(left), parse_unary(true), pos);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
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

  ExprPtr parse_primary() {
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

  ExprPtr parse_postfix(ExprPtr e) {
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

  ExprPtr parse_subscribed() {
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

  void parse_call_args(Expr& e) {
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

  ExprPtr parse_call(ExprPtr callee) {
    auto e = node(ExprKind::Call, callee->pos);  // errors point at what is called
    e->args.push_back(std::move(callee));
    parse_call_args(*e);
    return e;
  }

  ExprPtr parse_filter(ExprPtr operand, bool start_inline) {
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

  ExprPtr parse_test(ExprPtr operand) {
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

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) e = parse_filter(std::move(e), false);
      else if (is_name("is")) e = parse_test(std::move(e));
      else if (is_op("(")) e = parse_call(std::move(e));
      else return e;
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  std::string origin_;
  int loop_depth_ = 0;
  std::vector<SourcePos> open_;  // the tags whose blocks are open, for "never closed" messages
};

}  // namespace

ParsedTemplate parse_template(std::string_view source, const std::string& origin) {
  ParsedTemplate t;
  t.origin = origin;
  t.body = Parser(lex_template(source, origin), origin).parse_all();
  return t;
}

}  // namespace fsdp::chat
