// Fuzz target: what `fsdp_train prepare` reads from a JSONL corpus: the input reader that
// splits it into lines (data::InputReader, here also through gzip and zstd, whose
// corrupt or truncated streams must be refused by name) and the line parser
// (data::parse_jsonl_line: a text field, or pre-tokenized input_ids checked against the
// vocabulary). Input: one byte choosing the file kind (.jsonl, .jsonl.gz, .jsonl.zst,
// .txt), then the file's bytes. Properties: a line parsed as tokens holds only ids in
// [0, vocab); every line the reader returns is a non-empty document.
#include <string>

#include "fsdp/core/error.h"
#include "fsdp/data/text_inputs.h"
#include "fuzz_util.h"

namespace {

constexpr int64_t kVocab = 32000;
constexpr const char* kNames[] = {"in.jsonl", "in.jsonl.gz", "in.jsonl.zst", "in.txt"};

void parse_line(const std::string& line) {
  using Kind = fsdp::data::ParsedLine::Kind;
  const fsdp::data::ParsedLine p = fsdp::data::parse_jsonl_line(line, "text", kVocab);
  if (p.kind == Kind::kTokens)
    for (int32_t t : p.tokens) FUZZ_EXPECT(t >= 0 && t < kVocab);
  if (p.kind == Kind::kMalformed || p.kind == Kind::kInvalid) FUZZ_EXPECT(!p.error.empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const char* name = kNames[data[0] % 4];
  const auto path = fsdp::fuzz::scratch_dir() / name;
  fsdp::fuzz::write_file(path, data + 1, size - 1);
  if (data[0] % 4 == 0) parse_line(std::string(reinterpret_cast<const char*>(data + 1), size - 1));  // as one line
  try {
    fsdp::data::InputReader reader(path.string());
    fsdp::data::RawDocument doc;
    while (reader.next(doc)) {
      FUZZ_EXPECT(!doc.raw.empty() && doc.line >= 1);
      if (reader.format() == fsdp::data::InputFormat::kJsonl) parse_line(doc.raw);
    }
  } catch (const fsdp::Error&) {
  }
  return 0;
}
