// UTF-8 validation and replacement; see utf8.h.
#include "utf8.h"

namespace fsdp::data::hf {

int utf8_sequence_length(std::string_view s, size_t i, int* maximal) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  // Table 3-7 of the Unicode Standard: the lead byte fixes the length and the range of the
  // second byte; later bytes are 80..BF.
  int n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c == 0xE0) n = 3, lo = 0xA0;
  else if (c >= 0xE1 && c <= 0xEC) n = 3;
  else if (c == 0xED) n = 3, hi = 0x9F;
  else if (c >= 0xEE && c <= 0xEF) n = 3;
  else if (c == 0xF0) n = 4, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) n = 4;
  else if (c == 0xF4) n = 4, hi = 0x8F;
  if (n == 0) {  // C0, C1, F5..FF, or a stray continuation byte
    if (maximal) *maximal = 1;
    return 0;
  }
  int k = 1;
  for (; k < n && i + size_t(k) < s.size(); ++k) {
    const unsigned char x = b(i + size_t(k));
    const bool ok = k == 1 ? (x >= lo && x <= hi) : (x >= 0x80 && x <= 0xBF);
    if (!ok) break;
  }
  if (k == n) return n;
  if (maximal) *maximal = k;  // the lead byte and the continuation bytes that fitted
  return 0;
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const int n = utf8_sequence_length(s, i);
    if (n == 0) return false;
    i += size_t(n);
  }
  return true;
}

std::string to_valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    int maximal = 1;
    const int n = utf8_sequence_length(s, i, &maximal);
    if (n > 0) {
      out.append(s.substr(i, size_t(n)));
      i += size_t(n);
    } else {
      append_utf8(out, kReplacementChar);
      i += size_t(maximal);
    }
  }
  return out;
}

char32_t decode_utf8(std::string_view s, size_t i, int n) {
  const auto b = [&](size_t k) { return char32_t(static_cast<unsigned char>(s[i + k])); };
  switch (n) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(char(c));
  } else if (c < 0x800) {
    out.push_back(char(0xC0 | (c >> 6)));
    out.push_back(char(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(char(0xE0 | (c >> 12)));
    out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(char(0x80 | (c & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (c >> 18)));
    out.push_back(char(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(char(0x80 | (c & 0x3F)));
  }
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace fsdp::data::hf
