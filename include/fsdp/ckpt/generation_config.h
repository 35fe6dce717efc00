// The token ids a Hugging Face model folder says generation ends at: generation_config.json's
// "eos_token_id" (an id or a list of ids: Llama 3 Instruct lists <|end_of_text|> and
// <|eot_id|>), else config.json's, as transformers' GenerationConfig.from_model_config falls
// back to it. Ids are as written; the caller checks them against its vocabulary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fsdp::ckpt {

// Empty when `folder` has neither file or neither names an eos_token_id (null included).
// A file that is not JSON, or an eos_token_id that is neither an integer >= 0 nor a list of
// them, throws fsdp::Error naming the file and the key.
std::vector<int32_t> hf_eos_token_ids(const std::string& folder);

}  // namespace fsdp::ckpt
