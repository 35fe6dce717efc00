// Fuzz target: a Hugging Face tokenizer.json (data::Tokenizer over src/data/hf/), the file
// prepare, generate and tokenize read from a model folder. Properties of an accepted file:
// every text it encodes (a fixed set, and the input's own bytes as text, ill-formed UTF-8
// included) gives ids inside its vocabulary, with or without special tokens, and those ids
// decode without an error.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "fsdp/core/error.h"
#include "fsdp/data/tokenizer.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& dir = fsdp::fuzz::scratch_dir();
  fsdp::fuzz::write_file(dir / "tokenizer.json", data, size);
  std::unique_ptr<fsdp::data::Tokenizer> tok;
  try {
    tok = std::make_unique<fsdp::data::Tokenizer>((dir / "tokenizer.json").string());
  } catch (const fsdp::Error&) {
    return 0;
  }
  const std::string own(reinterpret_cast<const char*>(data), std::min<size_t>(size, 512));
  const std::vector<std::string> texts = {"", " ", "Hello world", "  a\tb\r\nc 123 \xC3\xA9\xF0\x9F\x98\x80 <s>",
                                          "\xFF\xC0\x80 <|eot_id|>", own};
  for (const std::string& text : texts) {
    for (const bool specials : {false, true}) {
      std::vector<int32_t> ids;
      tok->encode(text, {.add_special = specials, .parse_special = specials}, ids);
      for (int32_t id : ids) FUZZ_EXPECT(id >= 0 && id < tok->vocab_size());
      (void)tok->decode(ids, /*skip_special=*/!specials);
    }
  }
  return 0;
}
