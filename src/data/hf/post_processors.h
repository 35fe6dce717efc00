// tokenizer.json's "post_processor": the special tokens wrapped around an encoded text when
// the caller asks for them (`tokenizers`' add_special_tokens), e.g. Llama 3's
// <|begin_of_text|> before it. Supported: TemplateProcessing (its "single" template),
// RobertaProcessing and BertProcessing (cls ... sep), ByteLevel (offsets only: no ids
// change), Sequence, and null. Anything else is an error naming its path.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "json_node.h"

namespace fsdp::data::hf {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // `ids` is one encoded text; the result wraps it.
  virtual std::vector<int32_t> process(std::vector<int32_t> ids) const = 0;
  // The ids put before and after the text (for callers that need to know, e.g. BOS).
  virtual void around(std::vector<int32_t>& before, std::vector<int32_t>& after) const = 0;
};

// nullptr for a null post-processor.
std::unique_ptr<PostProcessor> make_post_processor(const JsonNode& node);

}  // namespace fsdp::data::hf
