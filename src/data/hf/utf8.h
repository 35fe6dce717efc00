// UTF-8 as the Hugging Face tokenizer pipeline needs it: text arrives as bytes (a corpus line,
// a prompt), the pipeline works on Unicode scalar values.
//
// Invalid UTF-8 is replaced, never rejected and never passed on: each maximal subpart of an
// ill-formed sequence becomes one U+FFFD, the Unicode Standard's recommended practice
// (chapter 3, "U+FFFD Substitution of Maximal Subparts"), which is what Python's
// bytes.decode("utf-8", "replace") does. `tokenizers` only ever sees Python str (valid
// Unicode), so text read from a file with errors="replace" is what both sides tokenize.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace fsdp::data::hf {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Length of the well-formed UTF-8 sequence at s[i] (1 to 4), or 0 when the bytes there do
// not begin one; `maximal` then holds the length of the maximal subpart to replace (>= 1).
int utf8_sequence_length(std::string_view s, size_t i, int* maximal = nullptr);

// `s` with every ill-formed subsequence replaced by U+FFFD; `s` itself (no copy) when it is
// already valid, which is the common case.
bool is_valid_utf8(std::string_view s);
std::string to_valid_utf8(std::string_view s);

// The code point of the well-formed sequence at s[i] of length n (from utf8_sequence_length).
char32_t decode_utf8(std::string_view s, size_t i, int n);
void append_utf8(std::string& out, char32_t c);
// Number of code points in valid UTF-8.
size_t utf8_length(std::string_view s);

}  // namespace fsdp::data::hf
