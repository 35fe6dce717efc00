// `fsdp_train prepare`: the command line over data::prepare_corpus (fsdp/data/prepare.h),
// which turns text / JSONL corpora into tokenized shards and their manifest.
#pragma once

namespace fsdp::train {

// The `prepare` subcommand: argv[0] is the command name, flags follow. Prints --help or a
// summary; returns 0 on success, 2 for a usage error, 1 when the data or tokenizer is bad.
int prepare_main(int argc, char** argv);

// The text `prepare --help` prints.
const char* prepare_help();

}  // namespace fsdp::train
