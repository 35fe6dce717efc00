// Token shards in Megatron-LM's indexed-dataset layout (MMapIndexedDataset, as written by
// Megatron-LM's tools/preprocess_data.py and NeMo), so data tokenized there loads here
// as is and ours loads there:
//   <prefix>.bin  the tokens of every document back to back, little-endian, one dtype
//   <prefix>.idx  magic "MMIDIDX\0\0" (9 bytes), u64 version (1), u8 dtype code
//                 (1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64, 7 f32, 8 u16), u64 N sequences,
//                 u64 M document-index entries, i32 sizes[N] (tokens per sequence),
//                 i64 pointers[N] (byte offset of each sequence in .bin),
//                 i64 doc_idx[M] (sequence index where each document starts; doc_idx[0] = 0
//                 and doc_idx[M-1] = N: one sequence per document here)
// Readers memory-map both files, so a corpus larger than RAM streams from the page cache.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fsdp::data {

// Writes one shard: add documents, then finish(), which writes <prefix>.bin.tmp and
// <prefix>.idx.tmp, fsyncs and renames both (the .idx last), so a crash never leaves a
// shard that looks complete. Token dtype: uint16 when vocab_size <= 65536, else int32.
// What a finished shard's files are, for the manifest: sizes and zlib CRC-32s of the bytes
// written (computed while writing, never read back).
struct ShardChecksum {
  int64_t bin_bytes = 0, idx_bytes = 0;
  uint32_t bin_crc32 = 0, idx_crc32 = 0;
  // The shard's loss-mask sidecar (loss_mask.h), where it has one (SFT data).
  bool has_mask = false;
  int64_t mask_bytes = 0;
  uint32_t mask_crc32 = 0;
};

class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(std::string prefix, int64_t vocab_size);
  ~IndexedDatasetWriter();  // removes the .tmp files if finish() was never called
  void add_document(const int32_t* tokens, int64_t count);
  void finish();
  int64_t num_documents() const;
  int64_t num_tokens() const;
  const ShardChecksum& checksum() const;  // after finish()

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A read-only shard. Opening validates the whole index (magic, version, dtype, counts,
// sizes and pointers inside .bin, .bin size) and throws fsdp::Error naming the file and
// what is wrong: a truncated or corrupt shard never reaches training.
class IndexedDataset {
 public:
  explicit IndexedDataset(const std::string& prefix);
  ~IndexedDataset();
  IndexedDataset(IndexedDataset&&) noexcept;
  IndexedDataset& operator=(IndexedDataset&&) noexcept;

  const std::string& prefix() const;
  int64_t num_documents() const;  // sequences (one per document)
  int64_t num_tokens() const;
  int64_t document_size(int64_t doc) const;
  // Copies tokens [offset, offset + count) of document `doc` into out as int32.
  void read(int64_t doc, int64_t offset, int64_t count, int32_t* out) const;
  // The largest token id in the shard (computed on first call by one pass; cached).
  int32_t max_token() const;
  // The first token at or above `vocab_size` (or negative), by one pass over the .bin: its
  // document, its offset in the document and its id; nullopt when every id is in range.
  struct TokenAt {
    int64_t document = 0, offset = 0, id = 0;
    int64_t position = 0;  // the token's index in the .bin
  };
  std::optional<TokenAt> first_token_outside(int64_t vocab_size) const;
  // The two files' bytes as mapped, for their checksums.
  std::pair<const unsigned char*, int64_t> bin_bytes() const;
  std::pair<const unsigned char*, int64_t> idx_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fsdp::data
