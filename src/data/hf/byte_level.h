// GPT-2's byte-to-character table: byte-level BPE (GPT-2, Llama 3, Qwen) runs on text whose
// every byte is mapped to one printable character (printable ASCII and Latin-1 bytes to
// themselves, the other 68 bytes to U+0100..U+0143), so the vocabulary needs no control or
// space characters and any byte sequence, valid UTF-8 or not, can be spelled.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace fsdp::data::hf {

// The UTF-8 of each byte's character.
const std::array<std::string, 256>& byte_chars();
// `text`'s bytes, each replaced by its character.
std::string bytes_to_chars(std::string_view text);
// The byte a character stands for, or nullopt for a character outside the table.
std::optional<unsigned char> char_to_byte(char32_t c);

}  // namespace fsdp::data::hf
