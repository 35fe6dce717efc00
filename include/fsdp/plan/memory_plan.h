// The memory plan: what one rank of a training run will hold on its device, by category,
// from the config alone and before anything is allocated (`fsdp_train plan`, and the
// trainer's start-up check). Every byte count is a double, so absurd shapes (a hidden size
// of 1e9, a billion layers) give absurd numbers instead of overflowing or allocating.
//
// Where each number comes from:
//   sharded state, gathered buffers    fsdp/engine_memory.h (the engine's arithmetic and pool)
//   activations, logits, scratch       model/activation_memory.h (the same bind() lists the
//                                      model allocates from)
//   RoPE tables, batch staging, ...    the trainer's own buffers, below
//   op scratch and workspaces (GPU)    cuBLASLt's workspace and the kernels' temporaries,
//                                      which the tensor allocator does not see
//   allocator headroom                 an estimate, not a measurement: on a GPU the CUDA
//                                      context, NCCL's buffers and the stream-ordered pool's
//                                      fragmentation; on the CPU the process outside its
//                                      tensors (code, MPI, thread stacks and heaps), or under
//                                      RLIMIT_AS the address space it reserves (host_memory.h)
// `tensor_peak` is the part the tensor allocators count; tests/mpi/test_memory_plan.cpp
// holds it to the allocator's measured peak (CPU runs on 1, 2 and 4 ranks and the CUDA
// emulator's allocator), within 10% for every strategy, mode and accumulation.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "fsdp/config/config.h"
#include "fsdp/model/llama_config.h"

namespace fsdp::plan {

// The float64 slots of the votes every rank all-reduces once per step (train/step_votes.h,
// which holds its StepVotes::kSlots to this).
inline constexpr int kStepVoteSlots = 7;

// Where the plan is for.
struct PlanTarget {
  int ranks = 1;            // the world size
  int ranks_per_node = 1;   // HYBRID_SHARD's default shard group; CPU ranks share the host's memory
  bool gpu = false;         // train.device resolves to cuda (bf16/fp16 compute, cuBLASLt, NCCL)
  double device_bytes = 0;  // what one rank may hold
  // CPU: the node's memory, which its ranks share (device_bytes = this / ranks on the node);
  // 0 on a GPU, where each rank has its device's.
  double node_bytes = 0;
  std::string device_source;  // where the memory figure came from ("--device-memory", "RLIMIT_AS", ...)
  // The limit is RLIMIT_AS, which counts reserved address space (OpenBLAS's buffers, thread
  // stacks and malloc arenas) as well: the CPU plan's row outside the tensors counts those
  // (plan/host_memory.h) instead of the resident estimate.
  bool address_space = false;

  // The same machine with `n` ranks (the CPU's share per rank recomputed).
  PlanTarget with_ranks(int n) const;
};

struct PlanRow {
  std::string name;
  double bytes = 0;
  std::string detail;       // how it is made up
  bool counted = true;      // the device's tensor allocator counts it (false: op scratch, headroom,
                            // and on the CPU the offload arena, which has an allocator of its own)
};

struct MemoryPlan {
  PlanTarget target;
  int micro_batch_size = 0;
  std::string checkpointing;   // the mode planned for ("none", "full", "selective", "+offload")
  std::vector<PlanRow> rows;   // on the device, in the order of the table
  std::vector<PlanRow> host;   // page-locked host memory on a GPU run (offloaded activations, snapshots)
  double peak = 0;             // the sum of rows
  double tensor_peak = 0;      // the sum of the counted rows
  double parameters = 0;       // the model's parameter count

  bool fits() const { return peak <= target.device_bytes; }
};

// The plan for cfg's run of `model` on `target`.
MemoryPlan plan_memory(const config::Config& cfg, const model::LlamaConfig& model, const PlanTarget& target);

// The data-parallel ranks FSDP shards a unit over for cfg's strategy on `target` (the shard
// group; expert parallelism's expert group is borrowed from it).
int shard_group(const config::Config& cfg, const PlanTarget& target);

// The largest train.micro_batch_size whose plan fits (nullopt: not even 1).
std::optional<int> largest_micro_batch(const config::Config& cfg, const model::LlamaConfig& model,
                                       const PlanTarget& target);
// The fewest ranks (a multiple of ranks_per_node past one node, as whole nodes; whole tensor
// groups of parallel.tensor; a shard group parallel.expert divides) whose plan
// fits under checkpointing mode `mode` ("none", "full", "selective"), up to `limit`.
std::optional<int> fewest_ranks(const config::Config& cfg, const model::LlamaConfig& model, const PlanTarget& target,
                                const std::string& mode, int limit = 1 << 20);

std::string human_bytes(double bytes);  // "1.50 GiB"
std::string human_count(double n);      // "6.74B"

// The plan as a table (one row per category, then peak, device memory and the verdict).
std::string format_plan(const MemoryPlan& plan);
// The searches as `fsdp_train plan` prints them: the largest micro-batch on the plan's ranks,
// then per activation checkpointing mode the fewest ranks at micro-batch 1 and the largest
// micro-batch.
std::string format_searches(const config::Config& cfg, const model::LlamaConfig& model, const MemoryPlan& plan);
// For a plan that does not fit: by how much, and the one change that saves the most (or
// the first that makes it fit; then the smallest parallel.expert that fits with one other
// change), as one sentence for an error line. Never a layout the trainer refuses
// (trainable_layout.h).
std::string advise(const config::Config& cfg, const model::LlamaConfig& model, const MemoryPlan& plan);

}  // namespace fsdp::plan
