// Splits a chat template into tokens the way Jinja 3.1's lexer does in transformers'
// environment (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False), so the text
// between tags comes out byte for byte as transformers renders it:
//   - "\r\n" and "\r" become "\n" everywhere, and one trailing newline of the template is dropped;
//   - `{%-`, `{{-`, `{#-` strip all whitespace before the tag, `-%}`, `-}}`, `-#}` all after it;
//   - trim_blocks: a newline right after `%}` or `#}` is dropped (`+%}` keeps it);
//   - lstrip_blocks: spaces and tabs from the start of a line up to `{%` or `{#` are dropped
//     (`{%+` keeps them); never before `{{`;
//   - `{% raw %}...{% endraw %}` is text.
// Inside tags: names, strings (Python escapes, as Jinja decodes them), integers (0x, 0o, 0b, _),
// floats, and operators; brackets must balance (an `}}` inside a dict literal does not end the tag).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fsdp/chat/template_error.h"

namespace fsdp::chat {

enum class TokenType { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Integer, Float, Operator, End };

struct Token {
  TokenType type;
  std::string text;  // data, name, decoded string, operator ("==", "(", ...)
  int64_t int_value = 0;
  double float_value = 0;
  SourcePos pos;
};

// Throws TemplateError naming the line and column of what does not lex.
std::vector<Token> lex_template(std::string_view source, const std::string& origin);

// "end of template", "'}}'", "name 'x'", ... for the parser's messages.
std::string describe(const Token& t);

}  // namespace fsdp::chat
