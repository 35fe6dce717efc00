#include "fsdp/chat/template_lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "fsdp/chat/python_string.h"

namespace fsdp::chat {

TemplateError::TemplateError(const std::string& origin, SourcePos pos, std::string message, bool raised)
    : fsdp::Error(origin + ":" + std::to_string(pos.line) + ":" + std::to_string(pos.col) + ": " +
                  (raised ? "the template raised an error: " : "") + message),
      pos_(pos),
      message_(std::move(message)),
      raised_(raised) {}

std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::Data: return "template text";
    case TokenType::VarBegin: return "'{{'";
    case TokenType::VarEnd: return "end of print statement";
    case TokenType::BlockBegin: return "'{%'";
    case TokenType::BlockEnd: return "end of statement block";
    case TokenType::Name: return "name '" + t.text + "'";
    case TokenType::String: return "a string";
    case TokenType::Integer:
    case TokenType::Float: return "a number";
    case TokenType::Operator: return "'" + t.text + "'";
    case TokenType::End: return "end of template";
  }
  return "?";
}

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& origin) : origin_(origin) {
    // Jinja: every newline sequence becomes "\n", and keep_trailing_newline=False drops one
    // trailing newline.
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    const size_t n = src_.size();
    while (pos < n) {
      size_t at = pos;
      char kind = 0;  // '{' variable, '%' block, '#' comment, 'r' raw
      size_t raw_end = 0;
      for (; at + 1 < n; ++at) {
        if (src_[at] != '{') continue;
        const char c = src_[at + 1];
        if (c == '%' && match_raw_begin(at, &raw_end)) {
          kind = 'r';
          break;
        }
        if (c == '{' || c == '%' || c == '#') {
          kind = c;
          break;
        }
      }
      if (kind == 0) {
        emit_data(pos, n);
        break;
      }
      const char sign = at + 2 < n && (src_[at + 2] == '-' || src_[at + 2] == '+') ? src_[at + 2] : 0;
      emit_stripped_data(pos, at, sign, kind != '{', line_starting);
      line_starting = false;
      if (kind == 'r') {
        pos = lex_raw(raw_end, &line_starting);
      } else if (kind == '#') {
        pos = lex_comment(at, at + 2 + (sign ? 1 : 0), &line_starting);
      } else {
        pos = lex_tag(at, kind, at + 2 + (sign ? 1 : 0), &line_starting);
      }
    }
    tokens_.push_back(Token{TokenType::End, "", 0, 0, pos_at(n)});
    return std::move(tokens_);
  }

 private:
  SourcePos pos_at(size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset) - 1;
    const size_t start = *it;
    return SourcePos{int(it - line_starts_.begin()) + 1,
                     int(py::length(std::string_view(src_).substr(start, offset - start))) + 1};
  }

  [[noreturn]] void fail(size_t offset, const std::string& msg) const { throw TemplateError(origin_, pos_at(offset), msg); }

  bool starts_with(size_t at, std::string_view s) const { return src_.compare(at, s.size(), s) == 0; }

  size_t skip_space(size_t p) const {
    // Python's \s in a str pattern: every Unicode whitespace character.
    while (p < src_.size()) {
      const auto c = static_cast<unsigned char>(src_[p]);
      if (c < 0x80) {
        if (!is_ascii_space(char(c)) && !(c >= 0x1C && c <= 0x1F)) break;
        ++p;
        continue;
      }
      const int len = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      const auto cps = py::decode(std::string_view(src_).substr(p, size_t(len)));
      if (cps.empty() || !py::is_space(cps[0])) break;
      p += size_t(len);
    }
    return p;
  }

  // `{%(-|+|)\s*raw\s*(-%}\s*|%})` at `at`; *end is just past it.
  bool match_raw_begin(size_t at, size_t* end) const {
    size_t p = at + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    p = skip_space(p);
    if (!starts_with(p, "raw")) return false;
    p = skip_space(p + 3);
    if (starts_with(p, "-%}")) {
      *end = skip_space(p + 3);
      return true;
    }
    if (starts_with(p, "%}")) {
      *end = p + 2;
      return true;
    }
    return false;
  }

  void emit_data(size_t b, size_t e) {
    if (e > b) tokens_.push_back(Token{TokenType::Data, src_.substr(b, e - b), 0, 0, pos_at(b)});
  }

  // The text before a tag, with Jinja's whitespace control applied.
  void emit_stripped_data(size_t b, size_t e, char sign, bool block_or_comment, bool line_starting) {
    std::string_view text(src_.data() + b, e - b);
    if (sign == '-') {
      const std::string stripped = py::strip(text, std::nullopt, false, true);
      text = text.substr(0, stripped.size());
    } else if (sign != '+' && block_or_comment) {  // lstrip_blocks
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting) && l_pos < text.size() && skip_space(b + l_pos) == e) text = text.substr(0, l_pos);
    }
    emit_data(b, b + text.size());
  }

  size_t lex_comment(size_t begin, size_t p, bool* line_starting) {
    for (; p < src_.size(); ++p) {
      size_t after = 0;
      if (starts_with(p, "+#}")) after = p + 3;
      else if (starts_with(p, "-#}")) after = skip_space(p + 3);
      else if (starts_with(p, "#}")) after = p + 2 + (starts_with(p + 2, "\n") ? 1 : 0);  // trim_blocks
      if (after) {
        *line_starting = src_[after - 1] == '\n';
        return after;
      }
    }
    fail(begin, "missing end of comment tag");
  }

  size_t lex_raw(size_t p, bool* line_starting) {
    const size_t body = p;
    for (; p + 1 < src_.size(); ++p) {
      if (src_[p] != '{' || src_[p + 1] != '%') continue;
      size_t q = p + 2;
      const char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : 0;
      if (sign) ++q;
      q = skip_space(q);
      if (!starts_with(q, "endraw")) continue;
      q = skip_space(q + 6);
      size_t after = 0;
      if (starts_with(q, "+%}")) after = q + 3;
      else if (starts_with(q, "-%}")) after = skip_space(q + 3);
      else if (starts_with(q, "%}")) after = q + 2 + (starts_with(q + 2, "\n") ? 1 : 0);
      if (!after) continue;
      emit_stripped_data(body, p, sign, true, *line_starting);
      *line_starting = src_[after - 1] == '\n';
      return after;
    }
    fail(body, "missing end of raw directive: '{% endraw %}'");
  }

  size_t lex_tag(size_t begin, char kind, size_t p, bool* line_starting) {
    const bool block = kind == '%';
    tokens_.push_back(Token{block ? TokenType::BlockBegin : TokenType::VarBegin, "", 0, 0, pos_at(begin)});
    std::string balance;  // closers still expected
    while (true) {
      if (p >= src_.size())
        fail(begin, std::string("unexpected end of template: this '") + (block ? "{%" : "{{") + "' is never closed");
      if (balance.empty()) {
        size_t after = 0;
        if (block) {
          if (starts_with(p, "+%}")) after = p + 3;
          else if (starts_with(p, "-%}")) after = skip_space(p + 3);
          else if (starts_with(p, "%}")) after = p + 2 + (starts_with(p + 2, "\n") ? 1 : 0);  // trim_blocks
        } else {
          if (starts_with(p, "-}}")) after = skip_space(p + 3);
          else if (starts_with(p, "}}")) after = p + 2;
        }
        if (after) {
          tokens_.push_back(Token{block ? TokenType::BlockEnd : TokenType::VarEnd, "", 0, 0, pos_at(p)});
          *line_starting = src_[after - 1] == '\n';
          return after;
        }
      }
      const size_t q = skip_space(p);
      if (q != p) {
        p = q;
        continue;
      }
      const char c = src_[p];
      if (is_digit(c)) {
        p = lex_number(p);
      } else if (is_name_start(c)) {
        size_t e = p;
        while (e < src_.size() && is_name_char(src_[e])) ++e;
        tokens_.push_back(Token{TokenType::Name, src_.substr(p, e - p), 0, 0, pos_at(p)});
        p = e;
      } else if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else {
        p = lex_operator(p, balance);
      }
    }
  }

  // (\d+_)*\d+ from p; returns the end, or p when there is no digit.
  size_t digits(size_t p) const {
    size_t e = p;
    while (e < src_.size() && is_digit(src_[e])) {
      ++e;
      if (e + 1 < src_.size() && src_[e] == '_' && is_digit(src_[e + 1])) ++e;
    }
    return e;
  }

  size_t lex_number(size_t p) {
    const SourcePos where = pos_at(p);
    // Float first, as Jinja tries it: digits, then a fraction, an exponent, or both.
    const bool after_dot = p > 0 && src_[p - 1] == '.';
    size_t e = digits(p);
    size_t f = e;
    bool is_float = false;
    if (!after_dot) {
      if (f + 1 < src_.size() && src_[f] == '.' && is_digit(src_[f + 1])) {
        f = digits(f + 1);
        is_float = true;
      }
      if (f < src_.size() && (src_[f] == 'e' || src_[f] == 'E')) {
        size_t x = f + 1;
        if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
        if (x < src_.size() && is_digit(src_[x])) {
          f = digits(x);
          is_float = true;
        }
      }
    }
    if (is_float) {
      std::string text;
      for (size_t i = p; i < f; ++i)
        if (src_[i] != '_') text += src_[i];
      tokens_.push_back(Token{TokenType::Float, text, 0, std::strtod(text.c_str(), nullptr), where});
      return f;
    }
    // Integers: 0b, 0o, 0x prefixes; a decimal without leading zeros; or zeros.
    int base = 10;
    size_t q = p;
    auto is_base_digit = [&](char ch) {
      if (base == 2) return ch == '0' || ch == '1';
      if (base == 8) return ch >= '0' && ch <= '7';
      if (base == 16) return is_digit(ch) || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
      return is_digit(ch);
    };
    std::string text;
    if (src_[p] == '0' && p + 1 < src_.size() && std::string_view("bBoOxX").find(src_[p + 1]) != std::string_view::npos) {
      const char b = char(src_[p + 1] | 0x20);
      base = b == 'b' ? 2 : b == 'o' ? 8 : 16;
      q = p + 2;
      while (q < src_.size()) {
        if (src_[q] == '_' && q + 1 < src_.size() && is_base_digit(src_[q + 1])) ++q;
        if (!is_base_digit(src_[q])) break;
        text += src_[q++];
      }
      if (text.empty()) {  // "0x" alone: Jinja reads the integer 0 and then a name
        base = 10;
        q = p + 1;
        text = "0";
      }
    } else if (src_[p] == '0') {
      q = p + 1;
      while (q < src_.size()) {
        if (src_[q] == '_' && q + 1 < src_.size() && src_[q + 1] == '0') ++q;
        if (src_[q] != '0') break;
        ++q;
      }
      text = "0";
    } else {
      q = digits(p);
      for (size_t i = p; i < q; ++i)
        if (src_[i] != '_') text += src_[i];
    }
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(text.c_str(), &end, base);
    if (errno == ERANGE) fail(p, "integer literal " + text + " is too large");
    tokens_.push_back(Token{TokenType::Integer, src_.substr(p, q - p), v, 0, where});
    return q;
  }

  size_t lex_string(size_t p) {
    const char quote = src_[p];
    size_t e = p + 1;
    while (e < src_.size() && src_[e] != quote) e += src_[e] == '\\' ? 2 : 1;
    if (e >= src_.size()) fail(p, std::string("unexpected char ") + (quote == '\'' ? "\"'\"" : "'\"'") +
                                      ": the string is never closed");
    tokens_.push_back(Token{TokenType::String, unescape(p + 1, e), 0, 0, pos_at(p)});
    return e + 1;
  }

  // Jinja decodes a string literal with Python's "unicode-escape" codec (after turning every
  // non-ASCII character into an escape, so those survive as they are).
  std::string unescape(size_t b, size_t e) const {
    std::string out;
    auto hex = [&](size_t at, int count, char32_t* cp) {
      *cp = 0;
      for (int k = 0; k < count; ++k) {
        if (at + size_t(k) >= e) return false;
        const char ch = src_[at + size_t(k)];
        int d = is_digit(ch) ? ch - '0' : (ch >= 'a' && ch <= 'f') ? ch - 'a' + 10 : (ch >= 'A' && ch <= 'F') ? ch - 'A' + 10 : -1;
        if (d < 0) return false;
        *cp = *cp * 16 + char32_t(d);
      }
      return true;
    };
    for (size_t i = b; i < e; ++i) {
      const char c = src_[i];
      if (c != '\\') {
        out += c;
        continue;
      }
      const char n = src_[++i];
      switch (n) {
        case '\n': break;  // a backslash-newline continues the line
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
          const int count = n == 'x' ? 2 : n == 'u' ? 4 : 8;
          char32_t cp = 0;
          if (!hex(i + 1, count, &cp) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            fail(i - 1, std::string("invalid \\") + n + " escape in a string literal");
          py::append_utf8(out, cp);
          i += size_t(count);
          break;
        }
        case 'N': fail(i - 1, "\\N{...} escapes are not supported");
        default:
          if (n >= '0' && n <= '7') {
            char32_t cp = 0;
            int k = 0;
            for (; k < 3 && i + size_t(k) < e && src_[i + size_t(k)] >= '0' && src_[i + size_t(k)] <= '7'; ++k)
              cp = cp * 8 + char32_t(src_[i + size_t(k)] - '0');
            py::append_utf8(out, cp);
            i += size_t(k) - 1;
          } else if (static_cast<unsigned char>(n) >= 0x80) {
            // "\é": the é was written as \xe9 before decoding, so the backslash escapes itself
            const int len = static_cast<unsigned char>(n) < 0xE0 ? 2 : static_cast<unsigned char>(n) < 0xF0 ? 3 : 4;
            const char32_t cp = py::decode(std::string_view(src_).substr(i, size_t(len)))[0];
            char buf[16];
            if (cp < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(cp));
            else if (cp < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(cp));
            else std::snprintf(buf, sizeof buf, "\\U%08x", unsigned(cp));
            out += buf;
            i += size_t(len) - 1;
          } else {
            out += '\\';  // an unknown escape keeps its backslash
            out += n;
          }
      }
    }
    return out;
  }

  size_t lex_operator(size_t p, std::string& balance) {
    static constexpr std::string_view two[] = {"//", "**", "==", "!=", ">=", "<="};
    for (auto op : two) {
      if (starts_with(p, op)) {
        tokens_.push_back(Token{TokenType::Operator, std::string(op), 0, 0, pos_at(p)});
        return p + 2;
      }
    }
    const char c = src_[p];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      const auto cps = py::decode(std::string_view(src_).substr(p, 4));
      std::string ch;
      py::append_utf8(ch, cps.empty() ? char32_t(c) : cps[0]);
      fail(p, "unexpected character '" + ch + "'");
    }
    if (c == '(' || c == '[' || c == '{') balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) fail(p, std::string("unexpected '") + c + "'");
      if (balance.back() != c) fail(p, std::string("unexpected '") + c + "', expected '" + balance.back() + "'");
      balance.pop_back();
    }
    tokens_.push_back(Token{TokenType::Operator, std::string(1, c), 0, 0, pos_at(p)});
    return p + 1;
  }

  std::string origin_;
  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex_template(std::string_view source, const std::string& origin) {
  size_t bad = 0;
  if (!py::valid_utf8(source, &bad)) {
    int line = 1;
    for (size_t i = 0; i < bad; ++i) line += source[i] == '\n';
    throw TemplateError(origin, SourcePos{line, 1}, "the template is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  }
  return Lexer(source, origin).run();
}

}  // namespace fsdp::chat
