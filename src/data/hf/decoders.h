// tokenizer.json's "decoder": how the tokens of ids become text again, as `tokenizers`
// decodes: each decoder rewrites the list of token strings in turn, and the result is their
// concatenation. Supported: ByteLevel (characters back to bytes, ill-formed UTF-8 shown as
// U+FFFD), Metaspace, Replace, ByteFallback (<0xXX> tokens to bytes), Fuse, Strip, BPEDecoder,
// Sequence, and null (tokens joined with spaces). Anything else is an error naming its path.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "json_node.h"

namespace fsdp::data::hf {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// nullptr for a null decoder.
std::unique_ptr<Decoder> make_decoder(const JsonNode& node);

// The text of `tokens` through `decoder` (or joined by spaces without one).
std::string decode_tokens(const Decoder* decoder, std::vector<std::string> tokens);

}  // namespace fsdp::data::hf
