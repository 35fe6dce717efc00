// A sentencepiece model trained on made-up words (syllables joined at random, a fixed
// seed): a real tokenizer of any small vocabulary without a fixture file, for the tests
// that run `generate` (the golden tiny Llama has 96 pieces).
#pragma once

#include <sentencepiece_trainer.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include "fsdp/core/error.h"

namespace fsdp::test {

// Writes <dir>/spm<vocab>.model (and its training text, once) and returns the model's path.
inline std::string made_up_tokenizer(const std::filesystem::path& dir, int vocab) {
  static const char* syllables[] = {"ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "po", "qui", "dra",
                                    "ble", "sto", "fen", "gar", "hu", "jo", "wy", "xen", "bri", "cho", "plu", "tre"};
  const std::filesystem::path text_path = dir / "spm.txt";
  if (!std::filesystem::exists(text_path)) {
    std::mt19937_64 rng(5);
    std::ofstream text(text_path);
    for (int line = 0; line < 3000; ++line) {
      for (int w = 0, n = 4 + int(rng() % 10); w < n; ++w) {
        for (int s = 0, m = 1 + int(rng() % 3); s < m; ++s) text << syllables[rng() % std::size(syllables)];
        text << (w + 1 < n ? " " : "\n");
      }
    }
  }
  const std::string prefix = (dir / ("spm" + std::to_string(vocab))).string();
  const auto status = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + text_path.string() + " --model_prefix=" + prefix + " --vocab_size=" + std::to_string(vocab) +
      " --model_type=unigram --character_coverage=1.0 --minloglevel=2");
  FSDP_CHECK(status.ok(), "training the test tokenizer failed: {}", status.ToString());
  return prefix + ".model";
}

}  // namespace fsdp::test
