// One reply of a chat model (`fsdp_train generate --chat`): a conversation rendered as its
// prompt (data/chat_prompt.h), generated with the KV-cache loop of model/generate.h until an
// end-of-turn token, decoded without its special tokens. What transformers users write as
//   ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")
//   out = model.generate(ids, ...)            # eos_token_id from generation_config.json
//   tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fsdp/data/chat_prompt.h"
#include "fsdp/model/generate.h"

namespace fsdp::data {
class Tokenizer;
}

namespace fsdp::train {

// Where replies stop, each id once, in this order: the model folder's eos_token_id
// (generation_config.json, else config.json; `model_dir` "" or a folder without them adds
// none), the template's end-of-turn tokens, the tokenizer's EOS. Ids outside [0, vocab) are
// an error naming where they came from.
struct ChatStops {
  std::vector<int32_t> ids;
  std::string described;  // "<|eot_id|> (3009: generation_config.json, the template's end of turn), ..."
};
ChatStops chat_stop_ids(const data::ChatPrompt& prompt, const data::Tokenizer& tok, const std::string& model_dir,
                        int64_t vocab_size);

struct ChatReply {
  std::string text;              // the reply, special tokens dropped
  model::GenerateResult result;  // its ids (the stop token included when generated) and timings
};

// Generates the reply to the prompt `prompt_ids` (ChatPrompt::ids). on_text, when set, gets
// the reply's text as it grows, piece by piece (what it adds to what was passed before; a
// token that ends inside a UTF-8 character waits for the next).
ChatReply generate_reply(model::LlamaDecoder& decoder, model::ParamProvider& params, const data::ChatPrompt& prompt,
                         const std::vector<int32_t>& prompt_ids, model::Sampler& sampler, int64_t max_new_tokens,
                         const ChatStops& stops, const std::function<void(const std::string&)>& on_text = {});

}  // namespace fsdp::train
