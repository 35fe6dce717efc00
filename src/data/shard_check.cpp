// Verifying token shards once per run; see Note [Shard verification] in shard_check.h.
#include "fsdp/data/shard_check.h"

#include <zlib.h>

#include <algorithm>

#include <fmt/format.h>

#include "fsdp/core/error.h"

namespace fsdp::data {

namespace {

// zlib's CRC-32 of a mapping in 64 MiB pieces, giving up early when asked to stop.
std::optional<uint32_t> crc32_of(std::pair<const unsigned char*, int64_t> bytes, const std::atomic<bool>* stop) {
  constexpr int64_t kPiece = int64_t(64) << 20;
  uint32_t crc = uint32_t(::crc32(0, nullptr, 0));
  for (int64_t at = 0; at < bytes.second; at += kPiece) {
    if (stop != nullptr && stop->load(std::memory_order_relaxed)) return std::nullopt;
    const int64_t n = std::min(kPiece, bytes.second - at);
    crc = uint32_t(::crc32(crc, bytes.first + at, uInt(n)));
  }
  return crc;
}

std::string check_file(const char* kind, const std::string& path, std::pair<const unsigned char*, int64_t> bytes, int64_t want_bytes,
                       uint32_t want_crc, const std::atomic<bool>* stop) {
  if (bytes.second != want_bytes)
    return fmt::format("{} {}: {} bytes, but manifest.json records {} (changed since `fsdp_train "
                       "prepare` wrote it)",
                       kind, path, bytes.second, want_bytes);
  const std::optional<uint32_t> crc = crc32_of(bytes, stop);
  if (crc && *crc != want_crc)
    return fmt::format("{} {}: CRC-32 {:08x} does not match manifest.json's {:08x} (the file is corrupt "
                       "or changed since `fsdp_train prepare` wrote it)",
                       kind, path, *crc, want_crc);
  return "";
}

}  // namespace

std::string check_shard(const IndexedDataset& shard, const std::optional<ShardChecksum>& expected, int64_t vocab_size,
                        const std::atomic<bool>* stop, const LossMask* mask) {
  if (expected) {
    std::string why = check_file("token shard file", shard.prefix() + ".bin", shard.bin_bytes(), expected->bin_bytes, expected->bin_crc32, stop);
    if (why.empty())
      why = check_file("token shard file", shard.prefix() + ".idx", shard.idx_bytes(), expected->idx_bytes, expected->idx_crc32, stop);
    if (why.empty() && expected->has_mask) {
      if (mask == nullptr)
        return fmt::format("loss mask {}.mask: missing, but manifest.json records one (mask_bytes {})", shard.prefix(),
                           expected->mask_bytes);
      why = check_file("loss mask file", mask->path(), mask->bytes(), expected->mask_bytes, expected->mask_crc32, stop);
    }
    if (!why.empty()) return why;
  }
  if (stop != nullptr && stop->load()) return "";
  if (const auto bad = shard.first_token_outside(vocab_size)) {
    return fmt::format("token shard {}: token {} (document {}, offset {}) has id {}, outside the vocabulary of {} "
                       "tokens (model.vocab_size; prepare the data with the model's tokenizer)",
                       shard.prefix(), bad->position, bad->document, bad->offset, bad->id, vocab_size);
  }
  return "";
}

ShardChecker::ShardChecker(std::vector<Shard> shards, int64_t vocab_size, int rank, int world, int64_t sync_bytes)
    : vocab_(vocab_size) {
  int64_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    total += shards[i].data->bin_bytes().second;
    if (int(i % size_t(world)) == rank) mine_.push_back(shards[i]);
  }
  if (total <= sync_bytes) {
    for (const Shard& s : mine_) {
      const std::string why = check_shard(*s.data, s.expected, vocab_, nullptr, s.mask);
      FSDP_CHECK(why.empty(), "{}", why);
    }
    done_.store(true, std::memory_order_release);
    return;
  }
  thread_ = std::thread([this] { run(); });
}

ShardChecker::~ShardChecker() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void ShardChecker::run() {
  for (const Shard& s : mine_) {
    if (stop_.load()) return;
    std::string why = check_shard(*s.data, s.expected, vocab_, &stop_, s.mask);
    if (!why.empty()) {
      std::lock_guard lock(mu_);
      failure_ = std::move(why);
      failed_.store(true, std::memory_order_release);
      return;
    }
  }
  done_.store(true, std::memory_order_release);
}

void ShardChecker::rethrow_failure() const {
  if (!failed_.load(std::memory_order_acquire)) [[likely]]
    return;
  std::lock_guard lock(mu_);
  FSDP_FAIL("{}", failure_);
}

}  // namespace fsdp::data
