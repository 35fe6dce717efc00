#include "fsdp/data/prepare.h"

#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <cstdio>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include <nlohmann/json.hpp>

#include "fsdp/core/error.h"
#include "fsdp/data/indexed_dataset.h"
#include "fsdp/data/loss_mask.h"
#include "fsdp/data/sft_example.h"
#include "fsdp/data/shard_manifest.h"
#include "fsdp/data/text_inputs.h"
#include "fsdp/data/tokenizer.h"

namespace fs = std::filesystem;

namespace fsdp::data {

namespace {

constexpr size_t kBatchBytes = size_t(4) << 20;  // raw text per batch handed to the workers
constexpr size_t kBatchDocs = 8192;
constexpr size_t kQueueDepth = 3;  // batches read ahead while the workers tokenize
constexpr int kBadExamples = 5;
constexpr int64_t kShardBytes = int64_t(256) << 20;

// The split decision: a pure function of (seed, document index), uniform in [0, 1).
double split_draw(uint64_t seed, int64_t doc_index) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (uint64_t(doc_index) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return double(z >> 11) * 0x1.0p-53;
}

struct Batch {
  size_t input = 0;
  bool last_of_input = false;
  std::vector<RawDocument> docs;
  std::exception_ptr error;  // the reader failed; rethrown in order by the consumer
};

// Reads every input in order on its own thread into a bounded queue of batches.
class BatchReader {
 public:
  BatchReader(const std::vector<std::string>& inputs, int64_t max_line_bytes)
      : inputs_(inputs), max_line_bytes_(max_line_bytes), thread_([this] { run(); }) {}
  ~BatchReader() {
    {
      std::lock_guard lock(mu_);
      cancelled_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // False when every input has been read.
  bool pop(Batch& out) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty() || finished_; });
    if (queue_.empty()) return false;
    out = std::move(queue_.front());
    queue_.pop_front();
    cv_.notify_all();
    return true;
  }
  std::vector<int64_t> bytes_per_input() {
    std::lock_guard lock(mu_);
    return bytes_;
  }

 private:
  bool push(Batch&& b) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return queue_.size() < kQueueDepth || cancelled_; });
    if (cancelled_) return false;
    queue_.push_back(std::move(b));
    cv_.notify_all();
    return true;
  }
  void run() {
    for (size_t i = 0; i < inputs_.size(); ++i) {
      Batch batch;
      batch.input = i;
      try {
        InputReader reader(inputs_[i], max_line_bytes_);
        RawDocument doc;
        size_t bytes = 0;
        while (reader.next(doc)) {
          bytes += doc.raw.size();
          batch.docs.push_back(std::move(doc));
          if (bytes >= kBatchBytes || batch.docs.size() >= kBatchDocs) {
            if (!push(std::move(batch))) return;
            batch = Batch{};
            batch.input = i;
            bytes = 0;
          }
        }
        std::lock_guard lock(mu_);
        bytes_.push_back(reader.bytes_read());
      } catch (...) {
        batch.error = std::current_exception();
      }
      batch.last_of_input = true;
      const bool failed = batch.error != nullptr;
      if (!push(std::move(batch)) || failed) break;
    }
    std::lock_guard lock(mu_);
    finished_ = true;
    cv_.notify_all();
  }

  std::vector<std::string> inputs_;
  int64_t max_line_bytes_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  std::vector<int64_t> bytes_;
  bool finished_ = false, cancelled_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

// What a worker made of one raw document.
struct DocResult {
  enum class Kind { kDocument, kEmpty, kMalformed, kInvalid };
  Kind kind = Kind::kEmpty;
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;  // SFT runs: one per token (empty: every token trained)
  std::string error;
  int sft_format = -1;        // the SftFormat of an SFT example
  bool truncated = false, dropped = false;
};

// What the workers share: the tokenizer (null for pre-tokenized inputs) and, in an SFT run,
// the example encoder.
struct Encoders {
  const Tokenizer* tok = nullptr;
  const SftEncoder* sft = nullptr;
  int64_t vocab = 0;
};

// One line of an SFT run: an SFT example, rendered and masked; anything else (text,
// input_ids) goes the pretraining way below and is trained whole. Every problem is fatal:
// SFT sets are curated, and a skipped example would change what the model learns.
bool process_sft(const RawDocument& doc, const Encoders& e, const PrepareOptions& o, DocResult& r) {
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(doc.raw, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    r.kind = DocResult::Kind::kInvalid;
    r.error = "not a JSON object (every line of an SFT dataset must be one)";
    return true;
  }
  const std::optional<SftFormat> format = sft_format_of(j);
  if (!format) return false;
  if (e.sft == nullptr) {
    r.kind = DocResult::Kind::kInvalid;
    r.error = fmt::format("a {} (SFT) example in an input whose first line was not one: prepare decides that a run "
                          "is SFT from each JSONL input's first line; put SFT examples in inputs of their own",
                          sft_format_name(*format));
    return true;
  }
  const SftEncoded enc = e.sft->encode(parse_sft_line(j, *format, o.sft.sharegpt, e.vocab));
  r.sft_format = int(*format);
  r.truncated = enc.truncated;
  r.dropped = enc.dropped;
  r.tokens = std::move(enc.tokens);
  r.mask = std::move(enc.mask);
  r.kind = r.tokens.empty() ? DocResult::Kind::kEmpty : DocResult::Kind::kDocument;
  return true;
}

// `tok` is null when the inputs are pre-tokenized (--vocab-size): only input_ids lines then.
DocResult process(const RawDocument& doc, InputFormat format, const Encoders& e, const PrepareOptions& o) {
  const Tokenizer* tok = e.tok;
  const int64_t vocab = e.vocab;
  DocResult r;
  if (doc.too_long) {
    r.kind = e.sft != nullptr ? DocResult::Kind::kInvalid : DocResult::Kind::kMalformed;
    r.error = fmt::format("line longer than --max-line-bytes {}{}", o.max_line_bytes, e.sft ? "" : ": skipped");
    return r;
  }
  if (format == InputFormat::kJsonl && e.sft != nullptr && process_sft(doc, e, o, r)) return r;
  const std::string& text_field = o.text_field;
  std::string_view text = doc.raw;
  ParsedLine parsed;
  if (format == InputFormat::kJsonl) {
    parsed = parse_jsonl_line(doc.raw, tok != nullptr ? text_field : std::string(), vocab);
    switch (parsed.kind) {
      case ParsedLine::Kind::kMalformed:
        r.kind = DocResult::Kind::kMalformed;
        r.error = std::move(parsed.error);
        return r;
      case ParsedLine::Kind::kInvalid:
        // An SFT example in a pretraining run says so rather than "no text field".
        if (e.sft == nullptr && process_sft(doc, e, o, r)) return r;
        r.kind = DocResult::Kind::kInvalid;
        r.error = std::move(parsed.error);
        return r;
      case ParsedLine::Kind::kTokens:
        r.kind = parsed.tokens.empty() ? DocResult::Kind::kEmpty : DocResult::Kind::kDocument;
        r.tokens = std::move(parsed.tokens);  // already tokenized: no BOS/EOS added
        return r;
      case ParsedLine::Kind::kText:
        text = parsed.text;
        break;
    }
  }
  // Text that is not UTF-8 (a binary file named .txt, another encoding) would tokenize into
  // byte pieces or <unk>s without a word: a bad line, counted against --max-bad-fraction.
  if (const size_t bad = first_invalid_utf8(text); bad != std::string_view::npos) {
    r.kind = DocResult::Kind::kMalformed;
    r.error = fmt::format("invalid UTF-8 at byte {}{} (a binary file, or text in another encoding: convert it with "
                          "iconv -t UTF-8)",
                          bad, format == InputFormat::kJsonl ? fmt::format(" of field '{}'", text_field) : "");
    return r;
  }
  if (tok->bos_id() >= 0) r.tokens.push_back(tok->bos_id());
  const size_t before = r.tokens.size();
  tok->encode(text, r.tokens);
  if (r.tokens.size() == before) {  // empty or whitespace-only text: no document
    r.tokens.clear();
    return r;
  }
  if (tok->eos_id() >= 0) r.tokens.push_back(tok->eos_id());
  r.kind = DocResult::Kind::kDocument;
  return r;
}

// The shards of one split: a new one when the current holds shard_tokens tokens.
class SplitWriter {
 public:
  SplitWriter(std::string name, fs::path dir, int64_t vocab, int64_t shard_tokens, bool masks, PrepareSplit& stats)
      : name_(std::move(name)), dir_(std::move(dir)), vocab_(vocab), shard_tokens_(shard_tokens), masks_(masks),
        stats_(stats) {}
  // `mask` empty: every token trained.
  void add(const std::vector<int32_t>& tokens, const std::vector<uint8_t>& mask) {
    if (!cur_) {
      const std::string shard = fmt::format("{}_{:05d}", name_, stats_.shards.size());
      stats_.shards.push_back(shard);
      cur_ = std::make_unique<IndexedDatasetWriter>((dir_ / shard).string(), vocab_);
      if (masks_) mask_ = std::make_unique<LossMaskWriter>((dir_ / shard).string());
    }
    cur_->add_document(tokens.data(), int64_t(tokens.size()));
    stats_.documents += 1;
    stats_.tokens += int64_t(tokens.size());
    if (mask.empty()) {
      stats_.trained_tokens += int64_t(tokens.size());
      if (mask_) {
        ones_.assign(tokens.size(), 1);
        mask_->add(ones_.data(), int64_t(ones_.size()));
      }
    } else {
      for (const uint8_t m : mask) stats_.trained_tokens += m;
      mask_->add(mask.data(), int64_t(mask.size()));
    }
    if (cur_->num_tokens() >= shard_tokens_) finish();
  }
  void finish() {
    if (!cur_) return;
    cur_->finish();
    ShardChecksum sum = cur_->checksum();
    if (mask_) {
      mask_->finish();
      sum.has_mask = true;
      sum.mask_bytes = mask_->file_bytes();
      sum.mask_crc32 = mask_->file_crc32();
    }
    stats_.checksums.push_back(sum);
    cur_.reset();
    mask_.reset();
  }

 private:
  std::string name_;
  fs::path dir_;
  int64_t vocab_, shard_tokens_;
  bool masks_;
  PrepareSplit& stats_;
  std::unique_ptr<IndexedDatasetWriter> cur_;
  std::unique_ptr<LossMaskWriter> mask_;
  std::vector<uint8_t> ones_;
};

// Removes the temporary output directory unless the run got to the final rename.
struct TmpDirGuard {
  fs::path path;
  bool keep = false;
  ~TmpDirGuard() {
    std::error_code ec;
    if (!keep) fs::remove_all(path, ec);
  }
};

void validate(const PrepareOptions& o) {
  FSDP_CHECK(!o.tokenizer.empty() || o.vocab_size > 0,
             "prepare needs a tokenizer model (--tokenizer), or the vocabulary size of pre-tokenized input_ids "
             "(--vocab-size)");
  FSDP_CHECK(o.tokenizer.empty() || o.vocab_size == 0,
             "--tokenizer and --vocab-size exclude each other (the tokenizer defines the vocabulary)");
  FSDP_CHECK(o.vocab_size >= 0 && o.vocab_size <= int64_t(1) << 31,
             "--vocab-size {} is outside [1, 2^31] (token ids are int32)", o.vocab_size);
  FSDP_CHECK(!o.output.empty(), "prepare needs an output directory (--output)");
  FSDP_CHECK(!o.inputs.empty(), "prepare needs at least one input file");
  FSDP_CHECK(o.val_fraction >= 0 && o.val_fraction < 1, "--val-fraction {} is outside [0, 1)", o.val_fraction);
  FSDP_CHECK(o.max_bad_fraction >= 0 && o.max_bad_fraction <= 1, "--max-bad-fraction {} is outside [0, 1]",
             o.max_bad_fraction);
  FSDP_CHECK(o.workers >= 0 && o.workers <= kMaxWorkers, "--workers {} is outside [1, {}] (0: every core)", o.workers,
             kMaxWorkers);
  FSDP_CHECK(o.max_line_bytes >= 1, "--max-line-bytes {} must be >= 1", o.max_line_bytes);
  FSDP_CHECK(!o.text_field.empty(), "--text-field is empty");
  FSDP_CHECK(o.sft.max_seq_len >= 0, "--max-seq-len {} must be >= 0 (0: no limit)", o.sft.max_seq_len);
  for (const std::string& in : o.inputs) {
    FSDP_CHECK(input_format(in) == InputFormat::kJsonl || !o.tokenizer.empty(),
               "input '{}' is text, which needs a tokenizer (--tokenizer); with --vocab-size prepare takes only "
               "pre-tokenized .jsonl inputs (input_ids)",
               in);
    std::error_code ec;
    FSDP_CHECK(fs::is_regular_file(in, ec), "input '{}' does not exist or is not a file", in);
  }
}

// Whether the first line of any JSONL input is an SFT example: the run's kind, known before
// any output is written.
bool any_sft_input(const std::vector<std::string>& inputs, int64_t max_line_bytes) {
  for (const std::string& path : inputs) {
    if (input_format(path) != InputFormat::kJsonl) continue;
    InputReader reader(path, max_line_bytes);
    RawDocument doc;
    if (!reader.next(doc) || doc.too_long) continue;
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(doc.raw, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded() && sft_format_of(j)) return true;
  }
  return false;
}

std::string strip_trailing_slashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

}  // namespace

namespace {

// Refuses an output that is a file, or a non-empty folder without --overwrite.
void check_output(const fs::path& out, bool overwrite) {
  std::error_code ec;
  if (fs::exists(out, ec)) {
    FSDP_CHECK(fs::is_directory(out, ec), "output '{}' exists and is not a directory", out.string());
    FSDP_CHECK(overwrite || fs::is_empty(out, ec), "output '{}' exists and is not empty; --overwrite replaces it",
               out.string());
  }
}

// The two splits' shard writers and what the pass over the inputs counts.
struct CorpusPass {
  const PrepareOptions& o;
  PrepareResult& r;
  SplitWriter& train;
  SplitWriter& val;
  std::vector<nlohmann::json> input_stats;
  int64_t doc_index = 0, input_docs = 0, input_tokens = 0, input_bad = 0;

  // One tokenized batch, in input order: the first fatal error, the bad-line examples and
  // the split of every document are the same whatever the worker count.
  void tally(const Batch& batch, const std::string& path, InputFormat format, std::vector<DocResult>& results) {
    for (size_t i = 0; i < results.size(); ++i) {
      DocResult& d = results[i];
      const int64_t line = batch.docs[i].line;
      (format == InputFormat::kJsonl ? r.jsonl_lines : r.text_records) += 1;
      switch (d.kind) {
        case DocResult::Kind::kInvalid:
          FSDP_FAIL("{}:{}: {}", path, line, d.error);
        case DocResult::Kind::kMalformed:
          r.bad_lines += 1;
          input_bad += 1;
          if (int(r.bad_examples.size()) < kBadExamples) r.bad_examples.push_back(fmt::format("{}:{}: {}", path, line, d.error));
          break;
        case DocResult::Kind::kEmpty:
          if (d.dropped) r.dropped += 1;
          if (d.sft_format >= 0) r.sft_examples[d.sft_format] += 1;
          break;
        case DocResult::Kind::kDocument:
          if (d.sft_format >= 0) r.sft_examples[d.sft_format] += 1;
          if (d.truncated) r.truncated += 1;
          (split_draw(o.split_seed, doc_index) < o.val_fraction ? val : train).add(d.tokens, d.mask);
          doc_index += 1;
          input_docs += 1;
          input_tokens += int64_t(d.tokens.size());
          break;
      }
    }
  }

  // A stop signal: throwing unwinds to prepare_corpus, whose guard removes the temporary
  // directory (the reader thread is cancelled and joined on the way).
  void check_stop() const {
    const int sig = o.stop_signal != nullptr ? o.stop_signal->load() : 0;
    FSDP_CHECK(sig == 0, "stopped by signal {} ({}): nothing was written", sig, strsignal(sig));
  }

  void end_input(const std::string& path) {
    FSDP_CHECK(input_docs > 0, "input '{}' holds no documents{}", path,
               input_bad > 0 ? fmt::format(" ({} malformed lines, first: {})", input_bad, r.bad_examples.front()) : "");
    input_stats.push_back({{"path", path}, {"documents", input_docs}, {"tokens", input_tokens}, {"bad_lines", input_bad}});
    if (!o.quiet) std::fprintf(stderr, "prepare: %s: %lld documents, %lld tokens\n", path.c_str(), (long long)input_docs, (long long)input_tokens);
    input_docs = input_tokens = input_bad = 0;
  }

  // Reads every input in batches, tokenizes each batch on `workers` threads, tallies it.
  void run(const Encoders& encoders, int workers) {
    std::unique_ptr<BatchReader> reading;
    try {
      reading = std::make_unique<BatchReader>(o.inputs, o.max_line_bytes);
    } catch (const std::system_error& e) {
      FSDP_FAIL("prepare: cannot start the input reader thread: {} (the process's thread limit, ulimit -u?)",
                e.code().message());
    }
    BatchReader& reader = *reading;
    Batch batch;
    std::vector<DocResult> results;
    while (reader.pop(batch)) {
      check_stop();
      if (batch.error) std::rethrow_exception(batch.error);
      const std::string& path = o.inputs[batch.input];
      const InputFormat format = input_format(path);
      results.assign(batch.docs.size(), DocResult{});
      const int64_t n = int64_t(batch.docs.size());
#pragma omp parallel for num_threads(workers) schedule(dynamic, 16)
      for (int64_t i = 0; i < n; ++i) {
        try {
          results[size_t(i)] = process(batch.docs[size_t(i)], format, encoders, o);
        } catch (const std::exception& e) {
          results[size_t(i)].kind = DocResult::Kind::kInvalid;
          results[size_t(i)].error = e.what();
        }
      }
      tally(batch, path, format, results);
      if (batch.last_of_input) end_input(path);
    }
    const std::vector<int64_t> bytes = reader.bytes_per_input();
    for (size_t i = 0; i < bytes.size() && i < input_stats.size(); ++i) {
      input_stats[i]["bytes"] = bytes[i];
      r.input_bytes += bytes[i];
    }
  }
};

// The final rename: an existing (empty, or --overwrite) output steps aside first.
void publish(const fs::path& tmp, const fs::path& out) {
  std::error_code ec;
  if (fs::exists(out, ec)) {
    const fs::path old = out.string() + ".old-" + std::to_string(::getpid());
    fs::rename(out, old);
    fs::rename(tmp, out);
    fs::remove_all(old, ec);
  } else {
    fs::rename(tmp, out);
  }
}

}  // namespace

PrepareResult prepare_corpus(const PrepareOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  validate(o);
  const std::unique_ptr<const Tokenizer> tok = o.tokenizer.empty() ? nullptr : std::make_unique<Tokenizer>(o.tokenizer);
  const int64_t vocab = tok ? tok->vocab_size() : o.vocab_size;

  PrepareResult r;
  const fs::path out = strip_trailing_slashes(o.output);
  r.output = out.string();
  check_output(out, o.overwrite);
  // Named by the flag, in words (std::filesystem's own text once reached the user).
  std::error_code ec;
  if (out.has_parent_path()) {
    fs::create_directories(out.parent_path(), ec);
    std::error_code again;
    FSDP_CHECK(!ec || fs::is_directory(out.parent_path(), again), "--output {}: cannot create {}: {}", out.string(),
               out.parent_path().string(), ec.message());
  }
  TmpDirGuard tmp{fs::path(out.string() + ".tmp-" + std::to_string(::getpid()))};
  fs::remove_all(tmp.path, ec);
  fs::create_directory(tmp.path, ec);
  FSDP_CHECK(!ec, "--output {}: cannot create {} next to it: {}", out.string(), tmp.path.string(), ec.message());

  const int workers = o.workers > 0 ? o.workers
                                    : std::min(kMaxWorkers, int(std::max(1u, std::thread::hardware_concurrency())));
  const int64_t token_bytes = vocab <= 65536 ? 2 : 4;
  const int64_t shard_tokens = o.shard_tokens > 0 ? o.shard_tokens : kShardBytes / token_bytes;
  std::optional<SftEncoder> sft;
  r.sft = any_sft_input(o.inputs, o.max_line_bytes);
  if (r.sft) {
    sft.emplace(tok.get(), vocab, o.sft);
    r.sft_template = sft->template_origin();
  }
  SplitWriter train("train", tmp.path, vocab, shard_tokens, r.sft, r.train);
  SplitWriter val("val", tmp.path, vocab, shard_tokens, r.sft, r.val);
  CorpusPass pass{o, r, train, val, {}};
  pass.run(Encoders{tok.get(), sft ? &*sft : nullptr, vocab}, workers);

  pass.check_stop();
  if (double(r.bad_lines) > o.max_bad_fraction * double(r.jsonl_lines + r.text_records)) {
    std::string examples;
    for (const std::string& e : r.bad_examples) examples += "\n  " + e;
    FSDP_FAIL("{} of {} lines are malformed, too long or not UTF-8, more than --max-bad-fraction {} allows; the "
              "first:{}",
              r.bad_lines, r.jsonl_lines + r.text_records, o.max_bad_fraction, examples);
  }
  FSDP_CHECK(r.train.documents > 0, "no document went to the train split ({} documents, --val-fraction {})",
             r.val.documents, o.val_fraction);
  train.finish();
  val.finish();
  write_shard_manifest(tmp.path / "manifest.json", o, tok.get(), vocab, r, pass.input_stats);
  publish(tmp.path, out);
  tmp.keep = true;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace fsdp::data
