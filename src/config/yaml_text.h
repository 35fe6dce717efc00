// What YAML 1.2 allows a document to hold: its printable characters (c-printable, spec
// 5.1), UTF-8 encoded. yaml-cpp reads bytes that are neither (invalid UTF-8, control
// characters) into scalars anyway, and dump_yaml then writes them back changed (its emitter
// replaces invalid bytes with U+FFFD), so the effective config a run logs and its checkpoints
// store would not be the one it ran with (found by tests/fuzz/fuzz_config_yaml.cpp). The
// loader refuses such text up front, naming where.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace fsdp::config::detail {

// The offset of the first byte that does not start a well-formed UTF-8 sequence (RFC 3629:
// no overlong forms, no surrogates, nothing past U+10FFFF) of a c-printable character (tab,
// LF, CR, U+0020-U+007E, U+0085, U+00A0-U+D7FF, U+E000-U+FFFD, U+10000-U+10FFFF); npos if none.
size_t first_unprintable(std::string_view text);

// The 1-based line and column of an offset into `text`, for messages.
struct TextPosition {
  size_t line = 1, column = 1;
};
TextPosition position_of(std::string_view text, size_t offset);

// The 1-based line where the n-th YAML document's content begins (n = 1: the first line
// that is not blank, a comment or a directive), or 0 when the text holds fewer documents with
// content. Documents are separated by marker lines: "---" or
// "..." at the start of a line, followed by a space, a tab or the line's end (YAML 1.2,
// c-forbidden: such a line ends any scalar, so no quoting or indentation hides it). Found
// on the text because yaml-cpp 0.7's LoadAll never returns for some inputs (a stray ',' at
// the top level: found by tests/fuzz/fuzz_config_yaml.cpp).
size_t document_content_line(std::string_view text, int n);

// `text` with every line break as LF: CRLF and a lone CR are line breaks in YAML 1.2
// (b-break), but yaml-cpp 0.7 takes a lone CR into a plain scalar, and dump_yaml then writes
// a value that loads back different (found by tests/fuzz/fuzz_config_yaml.cpp).
std::string with_lf_line_breaks(std::string_view text);

}  // namespace fsdp::config::detail
