// Jinja's grammar as chat templates use it, parsed into template_ast.h's nodes with Jinja's
// precedence: conditional < or < and < not < comparisons (chained, `in`, `not in`) < + - <
// ~ < * / // % < ** < unary - + < postfix (`.x`, `[i]`, `[a:b:c]`, calls) < filters and tests.
//
// Everything a template names that this interpreter does not implement is refused here, before
// any rendering, with its line and column: a tag (`include`, `extends`, `with`, ...), a filter,
// a test, a method (`.format(...)`). Syntax errors say what was expected and what was found.
#pragma once

#include <string>
#include <string_view>

#include "fsdp/chat/template_ast.h"

namespace fsdp::chat {

struct ParsedTemplate {
  std::string origin;
  Body body;
};

// Throws TemplateError (origin:line:col: message).
ParsedTemplate parse_template(std::string_view source, const std::string& origin = "chat_template");

// What the interpreter implements (defined in template_filters.cpp beside the filters and tests
// themselves); the parser checks names against these.
bool is_supported_filter(std::string_view name);
bool is_supported_test(std::string_view name);
bool is_supported_method(std::string_view name);

}  // namespace fsdp::chat
