// Metaspace's prepend_scheme, read the same way by its pre-tokenizer and its decoder: whether
// the replacement character goes before the first piece (always), only before the piece at the
// start of the input (first), or never.
#pragma once

#include <string>

#include "json_node.h"

namespace fsdp::data::hf {

enum class Prepend { Always, First, Never };

// Files written before prepend_scheme existed say add_prefix_space instead.
inline Prepend prepend_scheme(const JsonNode& node) {
  if (const auto scheme = node.get("prepend_scheme")) {
    const std::string s = scheme->string();
    if (s == "always") return Prepend::Always;
    if (s == "first") return Prepend::First;
    if (s == "never") return Prepend::Never;
    scheme->unsupported(s);
  }
  return node.boolean_or("add_prefix_space", true) ? Prepend::Always : Prepend::Never;
}

}  // namespace fsdp::data::hf
