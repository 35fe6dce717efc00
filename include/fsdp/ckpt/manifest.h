// A checkpoint's manifest.json: what a checkpoint holds (the run's state, the model shape,
// every file with its size and CRC-32, and for every unit the pieces of the files that
// hold it), as a struct, with its JSON written and read side by side in manifest.cpp (one
// to_json / from_json pair: a field is named in one place for both directions).
//
// Sharded, crash-safe training checkpoints (after torch.distributed.checkpoint and
// Megatron's distributed checkpointing). Layout of one, <checkpoint.dir>/step_<N>/:
//   manifest.json            rank 0: format, format_version, step, tokens/samples seen,
//                            world size, strategy, model shape, seeds, the effective config,
//                            every file with its size and CRC-32, and for every unit the
//                            pieces that hold it (file, global element offset, extent)
//   rank_<r>.safetensors     one per rank that owns a distinct shard (replica 0 of each
//                            shard: HYBRID_SHARD and NO_SHARD replicas are not written twice);
//                            tensors "<unit>.master|exp_avg|exp_avg_sq", fp32, each covering
//                            elements [begin, begin + extent) of that unit's flat buffer
//                            (padding past the unit's numel is never stored)
// Tensor parallelism (format_version 2, tensor_parallel T > 1): each tensor rank's units
// hold its slices of the parameters (model/param_units.h, Note [Tensor parallel layout]),
// so a unit's pieces carry the tensor rank whose flat buffer they cover (each rank's
// pieces tile [0, numel), numel being every tensor rank's), and the unit lists its slots
// (name, slice shape, offset, split dimension): with the rank, every stored element's
// place in the whole parameter, which is how a checkpoint saved at one (shard, tensor)
// layout loads at any other (CheckpointReader::read). Without tensor parallelism a
// manifest is format_version 1, as before, and one process's layout is the whole model's.
// Expert parallelism (format_version 3, model/expert_parallel.h): the units are one
// process's (the experts inside their blocks), and each rank stores its shards of its block
// units and of its expert units as runs of those whole units, at their one-process offsets
// (ParamSlot::whole_offset): pieces named by their run (ManifestPiece::tensor), tiling every
// unit as one process's pieces would. So the checkpoint is one process's layout, and loads
// at any expert degree and any FSDP size, and `export` reads it as it reads any other.
// With tensor parallelism too (tensor_parallel T > 1 in a version 3 manifest) the units are
// one process's as version 2 stores them: each tensor rank's slices, with their slots, and
// each rank's runs tile its tensor rank's (pieces carrying the tensor rank, as version 2's).
// How one is written and committed so that a crash never leaves half of one:
// checkpoint_writer.h; how one is verified and read back on any number of ranks:
// checkpoint_reader.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fsdp/model/llama_config.h"
#include "fsdp/model/param_units.h"

namespace fsdp::ckpt {

inline constexpr int kCheckpointFormatVersion = 3;  // the newest this build reads and writes
inline constexpr std::string_view kCheckpointFormat = "fsdp_train.checkpoint";
inline constexpr const char* kManifestFile = "manifest.json";

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
  // A mixture of experts' routing biases (model/router_bias.h), [layers][experts] float32;
  // empty when the run has none (and in manifests written before they existed). Small
  // and the same on every rank, so rank 0's manifest holds them, not the rank files.
  std::vector<std::vector<float>> router_bias;
};

// The frozen base a LoRA checkpoint's adapters were trained on (the base itself is not in
// the checkpoint): where it came from and a fingerprint of exactly the bytes trained
// against, so a resume or an export on another base is refused.
struct BaseReference {
  std::string path;          // model.init_from; "" = the seeded initialiser (train_seed)
  std::string quantization;  // "none" or "nf4"
  uint32_t crc32 = 0;        // of every unit's frozen bytes, concatenated in unit order
  uint64_t bytes = 0;        // how many
  bool operator==(const BaseReference&) const = default;
};

struct ManifestFile {
  std::string name;  // relative to the checkpoint directory
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};
struct ManifestPiece {
  int file = 0;        // index into Manifest::files
  int64_t begin = 0;   // global element offset in the unit (in tensor rank tensor_rank's layout)
  int64_t extent = 0;  // elements stored (clipped to the unit's numel)
  int tensor_rank = 0;
  // The name its state tensors go by in the file ("<tensor>.master", ...): the unit's name
  // when empty (one piece per unit and file). Format version 3: under expert parallelism a
  // rank holds several runs of a unit (its share of the block's other parameters, and of
  // its experts), each a piece named "<unit>@<begin>".
  std::string tensor;
};
// A parameter of a unit under tensor parallelism: tensor rank t holds slice t of `split`
// (-1: the whole parameter on every rank; 0: rows; 1: columns) at `offset`.
struct ManifestSlot {
  std::string name;
  std::vector<int64_t> shape;  // the slice's
  int64_t offset = 0;
  int split = -1;
};
struct ManifestUnit {
  std::string name;
  int64_t numel = 0;
  // Sorted by (tensor_rank, begin); each tensor rank's cover [0, numel) exactly.
  std::vector<ManifestPiece> pieces;
  std::vector<ManifestSlot> slots;  // tensor parallelism only: in offset order
};
struct Manifest {
  // 1 without tensor parallelism (readable by builds from before it), 2 with, 3 with
  // expert parallelism (named pieces).
  int format_version = 1;
  // The run that wrote it (train/run_ownership.h): a fresh start makes a new id, a resumed
  // run keeps its checkpoint's. "" in manifests written before run ids existed.
  std::string run_id;
  TrainState state;
  model::LlamaConfig model;
  std::string strategy;
  int world_size = 0, shard_group_size = 0;
  int tensor_parallel = 1;  // T; world_size is a multiple of shard_group_size * T
  std::string config_yaml;  // the effective config
  std::vector<ManifestFile> files;
  std::vector<ManifestUnit> units;
  std::optional<BaseReference> base;  // a LoRA run's frozen base ("base" in the JSON)
};

// "step_<N>" for a step.
std::string checkpoint_name(int64_t step);
// "<unit>.<kind>": a state tensor's name in a rank file.
std::string state_tensor_name(const std::string& unit, std::string_view kind);

// The manifest as the text of manifest.json.
std::string manifest_json(const Manifest& m);
// Parses manifest.json's text; `path` names it in errors (not an fsdp_train manifest, a
// newer format version, a missing or mistyped field, a value out of its range: see Note
// [Manifest schema] in manifest.cpp). Whether the pieces tile the units and the files
// exist is the reader's to check.
Manifest parse_manifest(const std::string& text, const std::string& path);
// True when `text` is JSON whose "format" is this checkpoint format; nothing else checked.
bool is_manifest_text(const std::string& text);
// True when `id` is a well-formed run id: 1 to 64 of [A-Za-z0-9._-].
bool is_valid_run_id(const std::string& id);

}  // namespace fsdp::ckpt
