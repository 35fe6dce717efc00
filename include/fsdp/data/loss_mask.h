// The per-token loss mask of supervised fine-tuning data: a sidecar file beside a Megatron
// shard's .bin/.idx (indexed_dataset.h), which stay exactly what megatron-core reads.
//
//   <prefix>.mask  magic "FSDPMASK" (8 bytes), u64 version (1), u64 N tokens,
//                  then N bytes, one per token of <prefix>.bin in the same order:
//                  1 = the token is a trained target (its prediction carries loss),
//                  0 = it is context only (a prompt, a system turn, a pad)
// Little-endian. N must equal the shard's token count. A byte per token rather than a bit
// keeps a document's mask readable at any offset with one memcpy; SFT corpora are small
// next to their token files (1 byte beside 2 or 4).
//
// The loader turns a 0 into an ignored target (kIgnoreIndex) for the token it marks: the
// target at position t of a window is token t + 1, so its mask byte is mask[t + 1].
// `prepare` records each file's size and CRC-32 in manifest.json (mask_bytes, mask_crc32),
// verified with the tokens (Note [Shard verification]).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace fsdp::data {

inline constexpr int64_t kLossMaskHeaderBytes = 24;

// Streams one shard's mask: add() per document (as the .bin's documents arrive), then
// finish(), which writes the header, fsyncs and renames <prefix>.mask.tmp to <prefix>.mask.
class LossMaskWriter {
 public:
  explicit LossMaskWriter(std::string prefix);
  ~LossMaskWriter();  // removes the .tmp file if finish() was never called
  void add(const uint8_t* mask, int64_t count);
  void finish();
  int64_t num_tokens() const;
  int64_t trained_tokens() const;
  // The finished file's size and zlib CRC-32 (after finish()).
  int64_t file_bytes() const;
  uint32_t file_crc32() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A read-only, memory-mapped mask. Opening checks the magic, version and that the size
// is the header plus `expected_tokens` bytes; errors name the file.
class LossMask {
 public:
  LossMask(const std::string& prefix, int64_t expected_tokens);
  ~LossMask();
  LossMask(LossMask&&) noexcept;
  LossMask& operator=(LossMask&&) noexcept;

  const std::string& path() const;
  // Copies bytes [first, first + count) (token positions in the .bin) into out; a byte that
  // is neither 0 nor 1 is an error naming the file and position.
  void read(int64_t first, int64_t count, uint8_t* out) const;
  // The whole file as mapped, for its checksum.
  std::pair<const unsigned char*, int64_t> bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Whether <prefix>.mask exists.
bool has_loss_mask(const std::string& prefix);

}  // namespace fsdp::data
