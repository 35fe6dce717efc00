// tokenizer.json's "pre_tokenizer": how normalized text is cut into the words the model
// tokenizes one by one, as `tokenizers` cuts it. Supported: Split (a string or a regex, every
// behavior, invert), ByteLevel (GPT-2's regex, add_prefix_space, the byte-to-character
// mapping), Metaspace (replacement, prepend_scheme always/first/never, split), Digits,
// Whitespace, WhitespaceSplit, Sequence, and null. Anything else is an error naming its path.
#pragma once

#include <memory>

#include "json_node.h"
#include "pieces.h"

namespace fsdp::data::hf {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(Pieces& pieces) const = 0;
};

// nullptr for a null pre-tokenizer.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonNode& node);

// "behavior" as tokenizer.json spells it ("Isolated", "MergedWithPrevious", ...).
SplitBehavior split_behavior(const JsonNode& node);

}  // namespace fsdp::data::hf
