// The tokenizer files a Hugging Face export carries, so that transformers' AutoTokenizer
// loads the folder with the tokenizer the run was trained with:
//   a sentencepiece tokenizer.model   copied, with a tokenizer_config.json written for
//                                     LlamaTokenizer (its BOS/EOS/UNK/PAD pieces)
//   a Hugging Face tokenizer.json     copied verbatim, with the files beside it that
//                                     transformers reads (tokenizer_config.json,
//                                     special_tokens_map.json, chat_template.jinja/.json)
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "fsdp/model/llama_config.h"

namespace fsdp::ckpt::detail {

struct TokenizerFiles {
  std::map<std::string, std::string> files;  // name in the export -> bytes
  int64_t vocab_size = 0;
  int64_t bos_id = -1, eos_id = -1;
};

// Reads and checks the tokenizer at `path` (a tokenizer.model or a tokenizer.json); errors
// name the file. The sentencepiece config needs the model's context length.
TokenizerFiles read_export_tokenizer(const std::string& path, const model::LlamaConfig& cfg);

}  // namespace fsdp::ckpt::detail
