// The regular expressions of tokenizer.json (Split pre-tokenizers, Replace normalizers), on
// PCRE2 with UTF and UCP, JIT-compiled.
//
// `tokenizers` runs these patterns on Oniguruma, whose Unicode classes differ from PCRE2's in
// three escapes, which are rewritten before compiling so the matches are the same:
//   \s  Oniguruma: the White_Space property. PCRE2 10.42 also counts U+180E (MONGOLIAN
//       VOWEL SEPARATOR, no longer White_Space since Unicode 6.3) -> the explicit set.
//   \w  Oniguruma: Letter, Mark, Decimal_Number, Connector_Punctuation. PCRE2: L, N, '_'.
//   \d  the same in both (Nd); left alone.
// \S and \W become the complements. Inside a character class \s and \w expand in place; a
// negated escape inside a class is refused (no published tokenizer uses one).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "json_node.h"

namespace fsdp::data::hf {

class UnicodeRegex {
 public:
  // Throws std::invalid_argument with PCRE2's message and the offset for a bad pattern.
  explicit UnicodeRegex(const std::string& onig_pattern);
  ~UnicodeRegex();
  UnicodeRegex(UnicodeRegex&&) noexcept;
  UnicodeRegex& operator=(UnicodeRegex&&) noexcept;

  // Byte ranges [start, end) of the successive non-overlapping matches in `text` (valid
  // UTF-8), as Oniguruma's find_iter gives them: leftmost-first, an empty match advances one
  // character past itself.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  // The first match at or after `from`, or {npos, npos}.
  std::pair<size_t, size_t> find(std::string_view text, size_t from = 0) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Impl;
  std::string pattern_;
  std::unique_ptr<Impl> impl_;
};

// The rewrite described above (exposed for its tests).
std::string onig_to_pcre2(const std::string& pattern);
// A literal string as a pattern that matches it (Split and Replace with {"String": ...}).
std::string escape_regex(std::string_view literal);
// A pattern as tokenizer.json writes one: {"String": literal} or {"Regex": pattern}; a
// pattern PCRE2 refuses is an error naming the node.
UnicodeRegex regex_of(const JsonNode& node);

}  // namespace fsdp::data::hf
