// A small SFT-like token corpus for the trainer tests: random documents of very uneven
// lengths, each with a loss mask training a random stretch at its end (from one token to all
// of it), written as prepare writes them (a shard, its .mask sidecar, a manifest with both
// checksums).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdp/data/indexed_dataset.h"
#include "fsdp/data/loss_mask.h"

namespace fsdp::test {

// `documents` documents of 2..max_len tokens below `vocab` into `dir` (created; emptied first).
// with_mask false writes the same tokens without a mask: every token trained.
inline void write_masked_corpus(const std::string& dir, int documents, int max_len, int64_t vocab, uint64_t seed,
                                bool with_mask = true) {
  namespace fs = std::filesystem;
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string prefix = (fs::path(dir) / "train_00000").string();
  data::IndexedDatasetWriter w(prefix, vocab);
  std::optional<data::LossMaskWriter> m;
  if (with_mask) m.emplace(prefix);
  std::mt19937_64 rng(seed);
  for (int d = 0; d < documents; ++d) {
    const int n = 2 + int(rng() % uint64_t(max_len - 1));
    const int trained = 1 + int(rng() % uint64_t(n));
    std::vector<int32_t> ids;
    std::vector<uint8_t> mask;
    for (int i = 0; i < n; ++i) {
      ids.push_back(int32_t(rng() % uint64_t(vocab)));
      mask.push_back(i >= n - trained ? 1 : 0);
    }
    w.add_document(ids.data(), n);
    if (m) m->add(mask.data(), n);
  }
  w.finish();
  const data::ShardChecksum& c = w.checksum();
  nlohmann::json sum = {{"bin_bytes", c.bin_bytes}, {"bin_crc32", c.bin_crc32}, {"idx_bytes", c.idx_bytes},
                        {"idx_crc32", c.idx_crc32}};
  if (m) {
    m->finish();
    sum["mask_bytes"] = m->file_bytes();
    sum["mask_crc32"] = m->file_crc32();
  }
  std::ofstream(fs::path(dir) / "manifest.json")
      << nlohmann::json{{"format", "megatron-mmap-v1"}, {"vocab_size", vocab}, {"shard_checksums", {{"train_00000", sum}}}}
             .dump();
}

}  // namespace fsdp::test
