// The byte-level table; see byte_level.h.
#include "byte_level.h"

#include <vector>

#include "utf8.h"

namespace fsdp::data::hf {

namespace {

struct Table {
  std::array<std::string, 256> chars;
  std::array<char32_t, 256> codepoint{};
  std::array<unsigned char, 68> shifted{};  // byte of U+0100 + i
  Table() {
    std::vector<bool> direct(256, false);
    for (int b = '!'; b <= '~'; ++b) direct[size_t(b)] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[size_t(b)] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[size_t(b)] = true;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      if (!direct[size_t(b)]) shifted[size_t(next - 256)] = static_cast<unsigned char>(b);
      codepoint[size_t(b)] = direct[size_t(b)] ? char32_t(b) : next++;
      append_utf8(chars[size_t(b)], codepoint[size_t(b)]);
    }
  }
};

const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

const std::array<std::string, 256>& byte_chars() { return table().chars; }

std::string bytes_to_chars(std::string_view text) {
  const auto& chars = table().chars;
  std::string out;
  out.reserve(text.size() * 2);
  for (unsigned char b : text) out += chars[b];
  return out;
}

std::optional<unsigned char> char_to_byte(char32_t c) {
  if (c < 256) {
    const bool direct = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
    if (direct) return static_cast<unsigned char>(c);
  }
  if (c >= 256 && c < 256 + 68) return table().shifted[size_t(c - 256)];
  return std::nullopt;
}

}  // namespace fsdp::data::hf
