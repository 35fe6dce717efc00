// logging.memory_snapshot_step: N writes, on every rank, the live allocations by category
// (fsdp/core/memory_category.h) at the memory peak of step N, as JSON, in the manner of
// torch.cuda.memory._snapshot() and SMP's memory tracker but by what the memory is for:
//
//   <profile_dir>/rank_<r>.memory_step_<N>.json
//   {"step": N, "rank": r, "moment": "...",
//    "allocators": [{"name": "cuda:0", "bytes_in_use": ..., "idle_cache_bytes": ...,
//                    "peak_bytes": ..., "groups": [{"name": "activations", "bytes": ...}, ...],
//                    "categories": [{"name": "activations/layers.0", "group": "activations",
//                                    "bytes": ..., "allocations": ..., "idle_cache": false}, ...]}]}
//
// Groups and categories are listed largest first; each list adds up to bytes_in_use, the
// allocator's bytes at that moment. The moment is the first of the step's highest bytes in
// use outside idle caches (Allocator::peak_snapshot); peak_bytes is the allocator's own
// peak over the step (what the step line's "peak mem" says), idle buffers included.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/core/allocator.h"

namespace fsdp::obs {

// The JSON document for the peak snapshots of `allocators` (the training device's, and the
// host's when they differ).
std::string memory_snapshot_json(int64_t step, int rank, const std::vector<const Allocator*>& allocators);

// memory_snapshot_json written to `path` (tmp + rename); throws fsdp::Error naming the file.
void write_memory_snapshot(const std::string& path, int64_t step, int rank,
                           const std::vector<const Allocator*>& allocators);

}  // namespace fsdp::obs
