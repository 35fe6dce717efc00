// Fuzz target: Megatron-LM indexed-dataset shards (data::IndexedDataset: the .idx header,
// sizes, pointers and document index against the .bin), then the token corpus the loader
// builds over them (data::open_token_corpus: windows across documents, the vocabulary check).
// Input: a little-endian u16 n, then n bytes of .bin, then the .idx (seeds from the writer).
// Properties of an accepted shard: every document reads in full, the tokens sum to
// num_tokens(), and every window of an accepted corpus reads.
#include <algorithm>
#include <vector>

#include "fsdp/core/error.h"
#include "fsdp/data/indexed_dataset.h"
#include "fsdp/data/loader.h"
#include "fuzz_util.h"

namespace {

constexpr int64_t kVocab = 1000, kSeqLen = 5;

void read_every_document(const fsdp::data::IndexedDataset& ds) {
  int64_t total = 0;
  std::vector<int32_t> tokens;
  for (int64_t d = 0; d < ds.num_documents(); ++d) {
    const int64_t n = ds.document_size(d);
    FUZZ_EXPECT(n >= 0);
    tokens.resize(size_t(n));
    ds.read(d, 0, n, tokens.data());
    total += n;
  }
  FUZZ_EXPECT(total == ds.num_tokens());
  (void)ds.max_token();
}

void read_every_window(const fsdp::data::SampleSource& corpus) {
  std::vector<int32_t> window(size_t(corpus.seq_len()) + 1);
  for (int64_t i = 0; i < std::min<int64_t>(corpus.num_samples(), 4096); ++i) {
    corpus.read_sample(i, window.data());
    for (int32_t t : window) FUZZ_EXPECT(t >= 0 && t < kVocab);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t bin = std::min<size_t>(size - 2, size_t(data[0]) | size_t(data[1]) << 8);
  const auto dir = fsdp::fuzz::scratch_dir() / "shards";
  std::filesystem::create_directories(dir);
  fsdp::fuzz::write_file(dir / "train_00000.bin", data + 2, bin);
  fsdp::fuzz::write_file(dir / "train_00000.idx", data + 2 + bin, size - 2 - bin);
  try {
    read_every_document(fsdp::data::IndexedDataset((dir / "train_00000").string()));
  } catch (const fsdp::Error&) {
    return 0;
  }
  try {
    read_every_window(*fsdp::data::open_token_corpus(dir.string(), "train", kSeqLen, kVocab));
  } catch (const fsdp::Error&) {
  }
  return 0;
}
