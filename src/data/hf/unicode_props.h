// The few Unicode character properties the pipeline asks about, as Rust's char methods
// answer them (utf8proc's tables): `tokenizers` calls char::is_whitespace (Strip, lstrip and
// rstrip of added tokens) and char::is_numeric (the Digits pre-tokenizer).
#pragma once

namespace fsdp::data::hf {

bool is_white_space(char32_t c);  // the White_Space property
bool is_numeric(char32_t c);      // general category Nd, Nl or No
bool is_word_char(char32_t c);    // Rust regex's \w: Alphabetic, M, Nd, Pc, Join_Control

}  // namespace fsdp::data::hf
