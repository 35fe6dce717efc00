// The statement (tag) grammar of chat templates, and parse_template, the parser's entry point:
// text and `{{ ... }}` between tags, and the tags themselves (`if`/`elif`/`else`; `for` with its
// `if` condition and `else`; `set` and block `set`; `macro`, `filter`, `generation`, `break`,
// `continue`). The expressions inside tags are the expression grammar's
// (template_expressions.cpp). A tag this interpreter does not implement is refused here.
#include "fsdp/chat/template_parser.h"

#include <initializer_list>
#include <string>
#include <vector>

#include "fsdp/chat/template_lexer.h"
#include "template_parser_impl.h"

namespace fsdp::chat {

namespace detail {

// Statements until a block whose tag is one of `end_names` (left unconsumed, after its '{%').
Body Parser::subparse(std::initializer_list<std::string_view> end_names) {
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
std::string Parser::parse_block(Body& body, std::initializer_list<std::string_view> ends) {
  expect(TokenType::BlockEnd, "end of statement block ('%}')");
  body = subparse(ends);
  return next().text;
}

void Parser::end_tag() { expect(TokenType::BlockEnd, "end of statement block ('%}')"); }

StmtPtr Parser::parse_statement() {
  const Token& t = cur();
  if (t.type != TokenType::Name) fail(t.pos, "expected a tag name, got " + describe(t));
  const std::string tag = t.text;
  const SourcePos pos = t.pos;
  next();
  auto s = std::make_unique<Stmt>();
  s->pos = pos;
  open_.push_back(pos);
  if (int(open_.size()) > kMaxTemplateNesting)
    fail(pos, nesting_message("blocks nest", kMaxTemplateNesting));
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
std::vector<std::string> Parser::parse_targets() {
  std::vector<std::string> names;
  const bool paren = skip_op("(");
  do {
    if (cur().type != TokenType::Name) fail_here("expected a name to assign to, got " + describe(cur()));
    names.push_back(next().text);
  } while (skip_op(",") && cur().type == TokenType::Name);
  if (paren) expect_op(")");
  return names;
}

}  // namespace detail

ParsedTemplate parse_template(std::string_view source, const std::string& origin) {
  ParsedTemplate t;
  t.origin = origin;
  t.body = detail::Parser(lex_template(source, origin), origin).parse_all();
  return t;
}

}  // namespace fsdp::chat
