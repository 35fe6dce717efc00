// Reading checkpoints (the layout: manifest.h): open and verify one, read any range of a
// unit's state, and find the newest one that verifies.
//
// Resharding: shards carry their global offsets, so any rank of any world size reads its
// new range from whichever files overlap it (CheckpointReader::read); that is how a run
// resumes on a different number of ranks. Under tensor parallelism the offsets are in a
// tensor rank's slices, which the manifest's slot table places in the whole parameters, so
// any tensor layout reads any other's (or one rank's whole model, for export).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fsdp/ckpt/manifest.h"
#include "fsdp/core/tensor.h"
#include "fsdp/dist/communicator.h"

namespace fsdp::ckpt {

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
  // Errors unless the checkpoint holds exactly these units (names and whole sizes: the
  // units may be any tensor rank's of any degree) of this model shape; the message names
  // the first difference.
  void check_model(const model::LlamaConfig& cfg, const std::vector<model::UnitLayout>& units) const;
  // Fills `out` (float32, CPU, contiguous) with elements [begin, begin + out.numel()) of
  // unit `unit`'s `kind` tensor ("master", "exp_avg", "exp_avg_sq") laid out as `target`
  // (this run's layout of the unit: a tensor rank's slices at any degree, or one rank's
  // whole unit) from whichever files and tensor ranks hold them; elements past
  // target.numel (padding) become 0.
  void read(const model::UnitLayout& target, int unit, std::string_view kind, int64_t begin, const Tensor& out) const;
  // The same in the stored layout of tensor rank 0 (without tensor parallelism: the unit).
  void read(int unit, std::string_view kind, int64_t begin, const Tensor& out) const;

 private:
  void check_structure() const;
  // Elements [begin, begin + n) of tensor rank t's stored unit into dst (untouched where
  // no piece covers them).
  void read_stored(int unit, std::string_view kind, int tensor_rank, int64_t begin, int64_t n, float* dst) const;
  void check_read(int unit, const Tensor& out) const;

  struct OpenFiles;
  std::string dir_;
  Manifest manifest_;
  std::unique_ptr<OpenFiles> open_;
};

// Checkpoint directories in `dir` whose name is step_<N> (no suffix), newest first. Does
// not look inside them.
std::vector<std::string> list_checkpoints(const std::string& dir);

// True when `dir` holds an fsdp_train checkpoint (a manifest.json of this format).
bool is_checkpoint_dir(const std::string& dir);

// Collective over `world`: the newest checkpoint in `dir` that opens and verifies (every
// rank checks a share of the files' CRCs; the verdict is agreed by an all-reduce). Broken
// ones are skipped with a warning naming what failed. "" when there is none. Rank 0's
// directory listing decides the candidates, so ranks cannot pick different checkpoints.
std::string find_latest_checkpoint(const std::string& dir, dist::Communicator& world);

// Collective over `world`: verifies one checkpoint (as above) and throws the first failure.
void verify_checkpoint(const std::string& path, dist::Communicator& world);

}  // namespace fsdp::ckpt
