// Note [Shard verification]
// Token shards are bytes a run trusts for days: a bit flipped on disk after `prepare` (an
// in-vocabulary id) trains silently, and an out-of-vocabulary id used to surface only when
// some step read it (step 180 in one probe). So each shard is verified once per run:
//   - its .bin and .idx sizes and CRC-32s against the manifest.json `prepare` wrote
//     (shard_checksums), and its loss-mask sidecar's (loss_mask.h) where it has one. Shards from Megatron-LM or NeMo carry none: their index structure
//     is still checked on open (indexed_dataset.h), their bytes are not, and the log says so;
//   - every token id against the vocabulary; the first offender is named with its shard,
//     document, offset and id.
// A corpus up to CorpusOptions::sync_check_bytes is verified when it is opened, before the
// first step. A larger one is verified by a thread of its own while training goes on (off
// the critical path): its first failure stops the run at the loader's next read, naming
// the shard. Each rank verifies its share of the shards (shard i when i % world == rank);
// a failure on any rank stops the job.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fsdp/data/indexed_dataset.h"
#include "fsdp/data/loss_mask.h"

namespace fsdp::data {

class ShardChecker {
 public:
  struct Shard {
    const IndexedDataset* data = nullptr;  // outlives the checker
    std::optional<ShardChecksum> expected;  // from manifest.json; none for foreign shards
    const LossMask* mask = nullptr;         // its loss mask, if it has one (outlives the checker)
  };
  // Verifies this rank's share of `shards` at once (throwing the first failure) when their
  // .bin files total at most `sync_bytes`, else on a background thread.
  ShardChecker(std::vector<Shard> shards, int64_t vocab_size, int rank, int world, int64_t sync_bytes);
  ~ShardChecker();  // stops the background thread
  ShardChecker(const ShardChecker&) = delete;
  ShardChecker& operator=(const ShardChecker&) = delete;

  // Throws the background thread's first failure, if it found one (an atomic load when not).
  void rethrow_failure() const;
  // Whether every shard of this rank's share has been verified (and passed).
  bool done() const { return done_.load(std::memory_order_acquire); }
  bool background() const { return thread_.joinable(); }

 private:
  void run();

  std::vector<Shard> mine_;
  int64_t vocab_;
  std::atomic<bool> stop_{false}, failed_{false}, done_{false};
  mutable std::mutex mu_;
  std::string failure_;
  std::thread thread_;
};

// One shard's verification: "" when it passes, else the one line naming what is wrong.
std::string check_shard(const IndexedDataset& shard, const std::optional<ShardChecksum>& expected, int64_t vocab_size,
                        const std::atomic<bool>* stop = nullptr, const LossMask* mask = nullptr);

}  // namespace fsdp::data
