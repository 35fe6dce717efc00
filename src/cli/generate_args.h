// What `fsdp_train generate` was asked (generate_command.cpp parses it) and the model it
// loads, shared by the plain path (generate_command.cpp) and the chat path
// (generate_chat_command.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fsdp/core/device.h"
#include "fsdp/core/dtype.h"
#include "fsdp/data/tokenizer.h"
#include "fsdp/model/sampling.h"
#include "fsdp/train/inference_model.h"

namespace fsdp::cli {

struct GenerateArgs {
  std::string checkpoint, tokenizer, prompt, adapter, base;
  bool has_prompt = false;
  int64_t max_new_tokens = 64;
  model::SamplingOptions sampling;
  std::string device = "auto";
  std::string dtype;  // "" = float32 on the CPU, bfloat16 on a GPU
  bool help = false;
  // --chat: the conversation from --system/--user/--assistant in command-line order, or
  // the conversations of --messages FILE; --chat-template FILE overrides the folder's.
  bool chat = false;
  std::vector<std::pair<std::string, std::string>> turns;  // role, content
  std::string messages_file, chat_template;
};

// The tokenizer (--tokenizer, resolved by the parser), and then the model on the device and
// dtype generation runs in, their vocabularies checked against each other; logged.
struct GenerationModel {
  data::Tokenizer tok;
  train::InferenceModel m;
  Device device;
  DType dtype;
};
data::Tokenizer load_generation_tokenizer(const GenerateArgs& a);
GenerationModel load_generation_model(const GenerateArgs& a, data::Tokenizer tok);

// The chat path (generate_chat_command.cpp); exit status.
int run_generate_chat(const GenerateArgs& a);

}  // namespace fsdp::cli
