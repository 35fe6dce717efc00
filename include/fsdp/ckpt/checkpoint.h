// Sharded, crash-safe training checkpoints (after torch.distributed.checkpoint and
// Megatron's distributed checkpointing).
//
// Layout of one checkpoint, <checkpoint.dir>/step_<N>/:
//   manifest.json            rank 0: format, format_version, step, tokens/samples seen,
//                            world size, strategy, model shape, seeds, the effective config,
//                            every file with its size and CRC-32, and for every unit the
//                            pieces that hold it (file, global element offset, extent)
//   rank_<r>.safetensors     one per rank that owns a distinct shard (replica 0 of each
//                            shard: HYBRID_SHARD and NO_SHARD replicas are not written twice);
//                            tensors "<unit>.master|exp_avg|exp_avg_sq", fp32, each covering
//                            elements [begin, begin + extent) of that unit's flat buffer
//                            (padding past the unit's numel is never stored)
//
// Crash safety (Note [Checkpoint commit]): every file is written into step_<N>.tmp/ and
// fsync'd; after every rank reports success, rank 0 writes the manifest (also tmp + fsync
// + rename) and renames step_<N>.tmp to step_<N>, fsyncing the parent. A directory named
// step_<N> without a manifest, or whose files fail their size or CRC check, is never
// resumed from. Older checkpoints beyond keep_last are renamed step_<N>.deleting before
// they are removed, so a crash while pruning cannot leave a half checkpoint under a
// step_<N> name.
//
// Resharding: shards carry their global offsets, so any rank of any world size reads its
// new range from whichever files overlap it (CheckpointReader::read).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fsdp/core/tensor.h"
#include "fsdp/dist/communicator.h"
#include "fsdp/model/llama_config.h"
#include "fsdp/model/param_units.h"

namespace fsdp::ckpt {

inline constexpr int kCheckpointFormatVersion = 1;
inline constexpr std::string_view kCheckpointFormat = "fsdp_train.checkpoint";

// The state tensors stored per unit, in file order.
inline constexpr std::string_view kStateKinds[] = {"master", "exp_avg", "exp_avg_sq"};

// What the trainer restores besides tensors.
struct TrainState {
  int64_t step = 0;
  int64_t tokens_seen = 0;
  int64_t samples_seen = 0;  // global data position (sum of global batches so far)
  uint64_t train_seed = 0, data_seed = 0;
  // Dynamic loss scaling (train.dtype float16, optim/loss_scaler.h): the scale, the clean
  // steps since it last changed and the steps skipped on overflow (AdamW's own step count
  // is step - skipped), so a resumed fp16 run continues exactly. 0 for other dtypes (and
  // in manifests written before these existed).
  double loss_scale = 0;
  int64_t loss_scale_good_steps = 0;
  int64_t skipped_steps = 0;
};

// One rank's share of one unit: elements [begin, begin + extent) of the unit's flat
// buffer, float32 tensors of that extent (which may run past numel into padding), on the
// host or on a GPU (the writer copies them to host buffers of its own first).
struct UnitShard {
  int64_t begin = 0;
  Tensor master, exp_avg, exp_avg_sq;
};

// Everything about the run a manifest records.
struct CheckpointMeta {
  TrainState state;
  model::LlamaConfig model;
  std::vector<model::UnitLayout> units;
  std::string strategy;      // "FULL_SHARD", ...
  int shard_group_size = 1;  // of the run that saved
  std::string config_yaml;   // the effective config
};

struct ManifestFile {
  std::string name;  // relative to the checkpoint directory
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};
struct ManifestPiece {
  int file = 0;        // index into Manifest::files
  int64_t begin = 0;   // global element offset in the unit
  int64_t extent = 0;  // elements stored (clipped to the unit's numel)
};
struct ManifestUnit {
  std::string name;
  int64_t numel = 0;
  std::vector<ManifestPiece> pieces;  // sorted by begin; together cover [0, numel) exactly
};
struct Manifest {
  int format_version = 0;
  TrainState state;
  model::LlamaConfig model;
  std::string strategy;
  int world_size = 0, shard_group_size = 0;
  std::string config_yaml;
  std::vector<ManifestFile> files;
  std::vector<ManifestUnit> units;
};

// "step_<N>" for a step.
std::string checkpoint_name(int64_t step);

// Reads one checkpoint directory. The constructor parses the manifest and checks its
// structure (format, version, pieces covering every unit) and that every file exists with
// its recorded size; verify() also checks CRCs. Every failure throws fsdp::Error naming
// the file and what is wrong.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& dir);
  ~CheckpointReader();

  const std::string& dir() const { return dir_; }
  const Manifest& manifest() const { return manifest_; }
  // CRC of file i (index into manifest().files) against the manifest.
  void verify_file(int i) const;
  void verify() const;  // every file
  // Errors unless the checkpoint holds exactly these units (names and sizes) of this model
  // shape; the message names the first difference.
  void check_model(const model::LlamaConfig& cfg, const std::vector<model::UnitLayout>& units) const;
  // Fills `out` (float32, CPU, contiguous) with elements [begin, begin + out.numel()) of
  // unit `unit`'s `kind` tensor ("master", "exp_avg", "exp_avg_sq") from whichever files
  // hold them; elements past the unit's numel (padding) become 0.
  void read(int unit, std::string_view kind, int64_t begin, const Tensor& out) const;

 private:
  struct OpenFiles;
  std::string dir_;
  Manifest manifest_;
  std::unique_ptr<OpenFiles> open_;
};

// Checkpoint directories in `dir` whose name is step_<N> (no suffix), newest first. Does
// not look inside them.
std::vector<std::string> list_checkpoints(const std::string& dir);

// Collective over `world`: the newest checkpoint in `dir` that opens and verifies (every
// rank checks a share of the files' CRCs; the verdict is agreed by an all-reduce). Broken
// ones are skipped with a warning naming what failed. "" when there is none. Rank 0's
// directory listing decides the candidates, so ranks cannot pick different checkpoints.
std::string find_latest_checkpoint(const std::string& dir, dist::Communicator& world);

// Collective over `world`: verifies one checkpoint (as above) and throws the first failure.
void verify_checkpoint(const std::string& path, dist::Communicator& world);

// True when `dir` holds an fsdp_train checkpoint (a manifest.json of this format).
bool is_checkpoint_dir(const std::string& dir);

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
  // Collective: waits for the background write, then commits. No-op when nothing pending.
  void finish();

 private:
  struct Job;
  void write_local(Job& job);
  void start_tmp_dir(int64_t step);

  dist::ProcessGroups& groups_;
  WriterOptions opt_;
  bool pending_ = false;
  std::unique_ptr<Job> job_;
  void take_snapshot(const std::vector<UnitShard>& shards);
  std::vector<UnitShard> snapshot_;  // host staging (async saves, GPU shards), reused across saves
  Tensor status_;                    // [world * 4] float64 for the commit all-gather
};

}  // namespace fsdp::ckpt
