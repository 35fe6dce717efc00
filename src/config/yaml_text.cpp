// YAML 1.2's printable UTF-8 and its document markers; see yaml_text.h.
#include "yaml_text.h"

#include <algorithm>

namespace fsdp::config::detail {

namespace {

bool printable(char32_t c) {
  return c == 0x09 || c == 0x0A || c == 0x0D || (c >= 0x20 && c <= 0x7E) || c == 0x85 || (c >= 0xA0 && c <= 0xD7FF) ||
         (c >= 0xE000 && c <= 0xFFFD) || (c >= 0x10000 && c <= 0x10FFFF);
}

}  // namespace

size_t first_unprintable(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto lead = static_cast<unsigned char>(s[i]);
    size_t more = 0;
    char32_t c = lead, least = 0;
    if (lead >= 0xC0 && lead < 0xE0) more = 1, c = lead & 0x1F, least = 0x80;
    else if (lead >= 0xE0 && lead < 0xF0) more = 2, c = lead & 0x0F, least = 0x800;
    else if (lead >= 0xF0 && lead < 0xF8) more = 3, c = lead & 0x07, least = 0x10000;
    else if (lead >= 0x80) return i;  // a continuation byte, or no UTF-8 lead at all
    if (s.size() - i <= more) return i;
    for (size_t k = 1; k <= more; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return i;
      c = (c << 6) | (b & 0x3F);
    }
    if (c < least || !printable(c)) return i;  // overlong, surrogate, past U+10FFFF, or a control
    i += more + 1;
  }
  return std::string_view::npos;
}

TextPosition position_of(std::string_view text, size_t offset) {
  const std::string_view before = text.substr(0, offset);
  const size_t newline = before.rfind('\n');
  return {1 + size_t(std::count(before.begin(), before.end(), '\n')),
          offset - (newline == std::string_view::npos ? 0 : newline + 1) + 1};
}

namespace {

// Whether `line` is a document marker; `rest` gets what follows the marker on its line.
bool document_marker(std::string_view line, std::string_view& rest) {
  if (line.size() < 3 || (line.substr(0, 3) != "---" && line.substr(0, 3) != "...")) return false;
  if (line.size() > 3 && line[3] != ' ' && line[3] != '\t' && line[3] != '\r') return false;
  rest = line.substr(3);
  return true;
}

// Whether a line holds document content: not blank, not only a comment, not a directive.
bool has_content(std::string_view line) {
  const size_t first = line.find_first_not_of(" \t\r");
  return first != std::string_view::npos && line[first] != '#' && line[first] != '%';
}

}  // namespace

size_t document_content_line(std::string_view text, int n) {
  int documents_with_content = 0;
  bool current_has_content = false;
  size_t line_no = 0;
  for (size_t begin = 0; begin <= text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(begin, end - begin);
    ++line_no;
    if (std::string_view rest; document_marker(line, rest)) {
      current_has_content = false;  // a new document starts here
      line = rest;
    }
    if (has_content(line) && !current_has_content) {
      current_has_content = true;
      if (++documents_with_content == n) return line_no;
    }
    begin = end + 1;
  }
  return 0;
}

std::string with_lf_line_breaks(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\r') {
      out += text[i];
    } else if (i + 1 >= text.size() || text[i + 1] != '\n') {
      out += '\n';  // a lone CR; a CR before LF is dropped, the LF follows
    }
  }
  return out;
}

}  // namespace fsdp::config::detail
