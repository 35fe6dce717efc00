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
//
// Three rooms: manifest.h (what manifest.json holds, written and read side by side),
// checkpoint_reader.h (open, verify, read any range, find the newest good one) and
// checkpoint_writer.h (write, commit, prune). This header includes all three.
#pragma once

#include "fsdp/ckpt/checkpoint_reader.h"
#include "fsdp/ckpt/checkpoint_writer.h"
#include "fsdp/ckpt/manifest.h"
