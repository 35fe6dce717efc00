// `fsdp_train generate`: text generation from a trained or imported model, so a user sees
// what the model learned. Loads the weights (a Hugging Face Llama folder), encodes the
// prompt with a sentencepiece model (BOS first where it has one), and prints the prompt
// followed by the completion on stdout as it is generated; log lines go to stderr.
// Sampling: temperature / top-k / top-p, greedy at temperature 0, seeded (model/sampling.h).
#pragma once

namespace fsdp::train {

// argv[0] is "generate", flags follow. Returns 0 on success, 2 for a usage error (bad or
// missing flag; nothing was run), 1 when a run failed (missing or bad model folder or
// tokenizer, prompt too long, tokenizer and model vocabularies differ).
int generate_main(int argc, char** argv);

// The text `generate --help` prints.
const char* generate_help();

}  // namespace fsdp::train
