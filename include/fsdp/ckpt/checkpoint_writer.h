// Writing checkpoints (the layout: manifest.h): every rank writes its shard, then a commit
// that all ranks agree on publishes the checkpoint by one rename and prunes the old ones.
//
// Crash safety (Note [Checkpoint commit] in checkpoint_writer.cpp): every file is written
// into step_<N>.tmp/ and fsync'd; after every rank reports success, rank 0 writes the
// manifest (also tmp + fsync + rename) and renames step_<N>.tmp to step_<N>, fsyncing the
// parent. A directory named step_<N> without a manifest, or whose files fail their size or
// CRC check, is never resumed from (checkpoint_reader.h). Older checkpoints beyond
// keep_last are renamed step_<N>.deleting before they are removed, so a crash while
// pruning cannot leave a half checkpoint under a step_<N> name; the checkpoint just
// written is never among them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fsdp/ckpt/manifest.h"
#include "fsdp/core/tensor.h"
#include "fsdp/dist/communicator.h"

namespace fsdp::ckpt {

// One rank's share of one unit: elements [begin, begin + extent) of the unit's flat
// buffer, float32 tensors of that extent (which may run past numel into padding), on the
// host or on a GPU (the writer copies them to host buffers of its own first).
struct UnitShard {
  int64_t begin = 0;
  Tensor master, exp_avg, exp_avg_sq;
};

// Everything about the run a manifest records, as the trainer knows it.
struct CheckpointMeta {
  TrainState state;
  model::LlamaConfig model;
  std::vector<model::UnitLayout> units;
  std::string strategy;      // "FULL_SHARD", ...
  int shard_group_size = 1;  // of the run that saved
  std::string config_yaml;   // the effective config
  std::string run_id;        // the run saving (Manifest::run_id)
  std::optional<BaseReference> base;  // a LoRA run: its frozen base (not saved, referenced)
};

// Timings of one save, for the log line.
struct SaveStats {
  int64_t step = 0;
  double stall_seconds = 0;   // the step loop's cost: the whole save when synchronous, the
                              // snapshot when asynchronous
  double write_seconds = 0;   // this rank's file write (background when asynchronous)
  uint64_t bytes = 0;         // this rank's file size
  std::string path;           // the committed checkpoint
};

struct WriterOptions {
  std::string dir;   // checkpoint.dir
  int keep_last = 0; // complete checkpoints kept after a commit (0 = all)
  bool async = false;
};

// What each rank reports at commit, all-gathered: whether it wrote a file (replica 0 of
// its shard), whether that worked, and the file's CRC and size for the manifest.
struct RankWriteStatus {
  bool wrote = false;
  bool ok = true;
  uint32_t crc32 = 0;
  uint64_t bytes = 0;

  static constexpr int64_t kSlots = 4;  // float64 slots in the all-gather
  void encode(double* slots) const;
  static RankWriteStatus decode(const double* slots);
};

// Saves checkpoints. save(), commit() and finish() are collectives: every rank calls them
// at the same step. Synchronously, save() returns once the checkpoint is committed.
// Asynchronously, save() copies the shards into snapshot buffers (allocated once) and
// returns; a background thread writes this rank's file. The trainer learns that every
// rank's write is done (local_busy() summed over ranks == 0, piggy-backed on its per-step
// all-reduce) and then calls commit(). A save while the previous one is still pending
// waits for it first.
class CheckpointWriter {
 public:
  CheckpointWriter(dist::ProcessGroups& groups, WriterOptions options);
  ~CheckpointWriter();

  // `shards[u]` is this rank's share of unit u (meta.units[u]).
  SaveStats save(const CheckpointMeta& meta, const std::vector<UnitShard>& shards);
  bool pending() const { return pending_; }  // a save awaiting commit (same on every rank)
  bool local_busy() const;                   // this rank's background write still running
  // Collective: commits the pending save (all ranks' writes finished). Returns the stats
  // of the committed save. Errors of any rank are reported on every rank as one fsdp::Error
  // naming the rank; the tmp directory is removed and older checkpoints are untouched.
  SaveStats commit();
  // Collective: waits for the background write, then commits; returns the committed save's
  // stats (what commit() returns), or nothing when no save was pending.
  std::optional<SaveStats> finish();

 private:
  struct Job;
  void write_local(Job& job);
  void start_tmp_dir(int64_t step);
  void take_snapshot(const std::vector<UnitShard>& shards);
  // The commit's steps (checkpoint_writer.cpp, Note [Checkpoint commit]).
  std::vector<RankWriteStatus> gather_status(const Job& job);
  Manifest build_manifest(const Job& job, const std::vector<RankWriteStatus>& status) const;
  void publish(const Job& job, const Manifest& manifest) const;
  [[noreturn]] void abandon(const Job& job, const std::string& local_error, const std::vector<int>& failed_ranks);
  void prune(const std::string& just_written) const;

  dist::ProcessGroups& groups_;
  WriterOptions opt_;
  bool pending_ = false;
  std::unique_ptr<Job> job_;
  std::vector<UnitShard> snapshot_;  // host staging (async saves, GPU shards), reused across saves
  Tensor status_;                    // [world * RankWriteStatus::kSlots] float64 for the commit all-gather
};

}  // namespace fsdp::ckpt
