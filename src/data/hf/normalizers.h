// tokenizer.json's "normalizer": what is done to the text before it is split, as `tokenizers`
// does it. Supported: NFC, NFD, NFKC, NFKD (utf8proc), Prepend, Replace (a string or a
// regex), Strip, Sequence, and null. Anything else is an error naming its JSON path.
#pragma once

#include <memory>
#include <string>

#include "json_node.h"

namespace fsdp::data::hf {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

// nullptr for a null normalizer.
std::unique_ptr<Normalizer> make_normalizer(const JsonNode& node);

}  // namespace fsdp::data::hf
