// Character properties through utf8proc; see unicode_props.h.
#include "unicode_props.h"

#include <utf8proc.h>

namespace fsdp::data::hf {

bool is_white_space(char32_t c) {
  // PropList.txt's White_Space (Unicode 15), which utf8proc does not expose as such.
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_numeric(char32_t c) {
  const utf8proc_category_t cat = utf8proc_category(utf8proc_int32_t(c));
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

bool is_word_char(char32_t c) {
  const utf8proc_category_t cat = utf8proc_category(utf8proc_int32_t(c));
  switch (cat) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL:  // letters and letter numbers: Alphabetic
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return c == 0x200C || c == 0x200D;  // Join_Control
  }
}

}  // namespace fsdp::data::hf
