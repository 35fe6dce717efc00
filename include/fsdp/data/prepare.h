// `fsdp_train prepare`: text / JSONL corpora -> tokenized Megatron shards + manifest.
//
// Inputs are read in order on one thread (decompression, splitting into documents) while
// --workers threads parse JSON lines and tokenize, batch by batch; results are written in
// input order, so the output is byte-identical whatever the worker count. Each document
// becomes [bos] pieces [eos] (BOS/EOS only where the tokenizer defines them; input_ids
// documents are taken as is) and goes to val when a hash of its index (in the whole
// corpus) and a fixed seed falls below --val-fraction: the split is deterministic and
// independent of sharding and threads.
//
// Output DIR/: train_00000.{bin,idx}, ... and val_00000.{bin,idx}, ... (see
// indexed_dataset.h; SFT data adds train_00000.mask, ...: loss_mask.h), a new shard when the current one holds ~256 MiB of tokens
// (PrepareOptions::shard_tokens; documents are never split across shards), and
// manifest.json, written last. Everything is written into DIR.tmp-<pid>/ and renamed to
// DIR at the end; on any error, and when stopped by a signal (PrepareOptions::stop_signal),
// the temporary directory is removed: no partial output. A line longer than
// --max-line-bytes (a 200 MB single-line JSON file) is skipped as a bad line without being
// read into memory whole.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/data/indexed_dataset.h"
#include "fsdp/data/sft_encoder.h"

namespace fsdp::data {

// Tokenizer threads at most: far above any machine's useful count, far below what makes
// thread creation fail (--workers 100000 once ended in SIGSEGV).
inline constexpr int kMaxWorkers = 1024;

struct PrepareOptions {
  std::string tokenizer;            // a tokenizer.model, a tokenizer.json or a model folder
                                    // holding either (data/tokenizer.h); or none, with vocab_size:
  // Without a tokenizer: the vocabulary size of pre-tokenized inputs (JSONL lines of
  // input_ids from any tokenizer: Llama 3's, SageMaker model parallel's json.gz, ...), every
  // id checked against it. Text inputs then have nothing to tokenize them and are refused.
  int64_t vocab_size = 0;
  std::string output;               // DIR; must not exist or be empty unless overwrite
  std::vector<std::string> inputs;  // .txt / .jsonl, optionally .gz / .zst
  double val_fraction = 0.0;        // in [0, 1)
  std::string text_field = "text";
  double max_bad_fraction = 0.001;  // of all non-blank JSONL lines and text paragraphs (malformed,
                                    // too long, or not UTF-8)
  int64_t max_line_bytes = int64_t(64) << 20;  // longer lines are bad lines, never read whole
  // Polled between batches: non-zero (the signal number) stops the run, which then
  // removes its temporary directory and throws. Null = never.
  const std::atomic<int>* stop_signal = nullptr;
  int workers = 0;                  // tokenizer threads, at most kMaxWorkers; 0 = hardware concurrency
  bool overwrite = false;           // replace a non-empty DIR
  int64_t shard_tokens = 0;         // tokens per shard before a new one; 0 = 256 MiB's worth
  uint64_t split_seed = 0x5eedf5d9ULL;
  bool quiet = false;               // no progress lines on stderr
  // Supervised fine-tuning (sft_encoder.h): how examples are rendered, masked and cut. A run
  // is SFT when the first line of any JSONL input is an SFT example (sft_example.h); its
  // shards then get loss-mask sidecars (loss_mask.h), text and input_ids lines trained whole.
  SftOptions sft;
};

struct PrepareSplit {
  std::vector<std::string> shards;  // names in DIR, without .bin/.idx
  std::vector<ShardChecksum> checksums;  // one per shard, in the same order
  int64_t documents = 0;
  int64_t tokens = 0;
  int64_t trained_tokens = 0;  // tokens whose mask is 1 (all of them without a mask)
};

struct PrepareResult {
  std::string output;  // the final DIR
  PrepareSplit train, val;
  int64_t input_bytes = 0;   // decompressed bytes read
  int64_t jsonl_lines = 0;   // non-blank JSONL lines
  int64_t text_records = 0;  // paragraphs of text inputs (an over-long line counts as one)
  int64_t bad_lines = 0;     // malformed or over-long lines skipped
  std::vector<std::string> bad_examples;  // "file:line: why" for the first few
  double seconds = 0;
  // Supervised fine-tuning: whether the shards carry loss masks, the examples read by format
  // (sft_format_name order), and how many were cut to --max-seq-len or dropped.
  bool sft = false;
  std::string sft_template;  // where the chat template came from, or "plain"
  int64_t sft_examples[kSftFormats] = {};
  int64_t truncated = 0, dropped = 0;
};

// Throws fsdp::Error (one message naming the file and line where there is one) on bad
// input; nothing is left under options.output then.
PrepareResult prepare_corpus(const PrepareOptions& options);

}  // namespace fsdp::data
