// YAML 1.2's printable UTF-8; see yaml_text.h.
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

}  // namespace fsdp::config::detail
