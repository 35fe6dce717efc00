// Reading documents from prepare's inputs, one file at a time, in order.
//   .txt    plain UTF-8 text; a document is a paragraph: a run of non-blank lines, ended
//           by one or more blank (empty or whitespace-only) lines. Its lines are joined
//           with '\n'; '\r' before a line end is dropped.
//   .jsonl  one JSON object per line (.json too: SageMaker model parallel's json.gz shards
//           are JSON Lines); blank lines are skipped. An object carries either a
//           text field (`text` unless told otherwise) or `input_ids`, an array of token ids
//           already tokenized (SageMaker model parallel's format), taken as is.
// Either may end in .gz (zlib) or .zst (zstd), decompressed while streaming.
// The reader only splits the input into raw documents; parsing a JSON line is
// parse_jsonl_line, which prepare's workers run in parallel.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fsdp::data {

enum class InputFormat { kText, kJsonl };

// The format the file name says (.txt / .jsonl, then optionally .gz / .zst); throws
// fsdp::Error for any other name.
InputFormat input_format(const std::string& path);

// One document as read, not yet parsed or tokenized.
struct RawDocument {
  int64_t line = 0;  // 1-based line of the input where it starts
  std::string raw;   // a paragraph (kText) or one JSON line (kJsonl)
  // A line longer than the reader's limit: skipped without being held in memory (raw is
  // empty); prepare counts it as a bad line.
  bool too_long = false;
};

class InputReader {
 public:
  // Opens the file; throws fsdp::Error naming it when it is missing or unreadable. A line
  // longer than max_line_bytes is never held whole: the reader skips to its end and returns
  // it as a document with too_long set (in a text file, apart from its paragraph).
  explicit InputReader(const std::string& path, int64_t max_line_bytes = int64_t(64) << 20);
  ~InputReader();

  // The next document; false at the end. Throws fsdp::Error naming the file on a read
  // error or corrupt / truncated compressed data.
  bool next(RawDocument& doc);

  InputFormat format() const { return format_; }
  const std::string& path() const { return path_; }
  int64_t bytes_read() const { return bytes_; }  // decompressed bytes so far

  class Source;  // the byte stream: plain, gzip or zstd

 private:
  // The next line (false at the end); a line over the limit comes back empty with
  // *too_long set, its bytes read and dropped.
  bool next_line(std::string& line, bool* too_long);
  // Reads more of the input into buf_; false at its end.
  bool fill();

  std::string path_;
  InputFormat format_;
  int64_t max_line_bytes_;
  int64_t pending_too_long_ = 0;  // a text file's over-long line (its line number) after its paragraph
  std::unique_ptr<Source> source_;
  std::string buf_;
  size_t pos_ = 0;
  bool eof_ = false;
  int64_t line_no_ = 0, bytes_ = 0;
};

// The offset of the first byte of `text` that does not belong to well-formed UTF-8 (an
// overlong form, a surrogate, a code point past U+10FFFF, a sequence cut short), or npos
// when all of it is UTF-8.
size_t first_invalid_utf8(std::string_view text);

// One JSONL line, parsed.
struct ParsedLine {
  enum class Kind {
    kText,       // text holds the document
    kTokens,     // tokens holds validated input_ids
    kMalformed,  // not a JSON object: counted against --max-bad-fraction
    kInvalid,    // well-formed but unusable (no text field, ids out of range): fatal
  };
  Kind kind = Kind::kMalformed;
  std::string text;
  std::vector<int32_t> tokens;
  std::string error;  // why, for kMalformed / kInvalid (without file:line)
};

// Parses one JSONL line: the string `text_field`, else `input_ids` (each id in
// [0, vocab_size)); an empty text_field takes input_ids only (no tokenizer to encode text).
ParsedLine parse_jsonl_line(std::string_view line, const std::string& text_field, int64_t vocab_size);

}  // namespace fsdp::data
