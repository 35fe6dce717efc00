// What YAML 1.2 allows a document to hold: its printable characters (c-printable, spec
// 5.1), UTF-8 encoded. yaml-cpp reads bytes that are neither (invalid UTF-8, control
// characters) into scalars anyway, and dump_yaml then writes them back changed (its emitter
// replaces invalid bytes with U+FFFD), so the effective config a run logs and its checkpoints
// store would not be the one it ran with (found by tests/fuzz/fuzz_config_yaml.cpp). The
// loader refuses such text up front, naming where.
#pragma once

#include <cstddef>
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

}  // namespace fsdp::config::detail
