// Python's str operations on UTF-8 text, as chat templates call them (`content.strip()`,
// `role | upper`, `text[1:]`): Python counts code points, treats every Unicode whitespace
// character as whitespace (NBSP and U+3000 included: `"\u00a0hi".strip()` is "hi"), and
// maps case for all of Unicode. The text is valid UTF-8 (every input is checked on entry).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fsdp::chat::py {

// Code points <-> UTF-8.
std::vector<char32_t> decode(std::string_view s);
std::string encode(const std::vector<char32_t>& cps, size_t begin = 0, size_t end = SIZE_MAX);
void append_utf8(std::string& out, char32_t c);
bool valid_utf8(std::string_view s, size_t* bad_offset = nullptr);
size_t length(std::string_view s);  // code points

bool is_space(char32_t c);  // str.isspace()
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s);
std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
int64_t count(std::string_view s, std::string_view sub);
int64_t find(std::string_view s, std::string_view sub, bool reverse);  // code point index or -1

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string capitalize(std::string_view s);  // str.capitalize()
std::string title(std::string_view s);       // str.title()
bool is_lower(std::string_view s);           // str.islower()
bool is_upper(std::string_view s);           // str.isupper()

}  // namespace fsdp::chat::py
