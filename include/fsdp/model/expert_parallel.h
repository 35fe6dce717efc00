// Expert parallelism as the model sees it (Megatron-LM's --expert-model-parallel-size,
// torchtitan's dp2ep): the E ranks of an expert group each hold num_experts / E whole
// experts of every MoE layer (expert rank r: experts [r n/E, (r+1) n/E), contiguous), and
// every (token, choice) pair travels to the rank of its expert and back by all-to-all
// (moe_dispatch.h: Note [Expert-parallel dispatch]). Everything else (attention, norms,
// the router, embedding and head) is whole on every rank, as without it.
//
// Each layer's experts are then a unit of their own, "layers.<l>.experts", holding this
// rank's experts' w1|w3 and w2 (param_units.h): the FSDP engine shards it over the ranks
// that hold the same experts, not over the whole shard group as the block's unit.
//
// The model never sees ranks: it talks to its expert group through ExpertGroup, which the
// engine's side implements over a communicator (fsdp/expert_group.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fsdp/core/tensor.h"
#include "fsdp/model/llama_config.h"

namespace fsdp::model {

// The collectives expert parallelism needs, over the E ranks of this rank's expert group
// (rank order = expert order). Blocking: each returns once its output may be read.
class ExpertGroup {
 public:
  virtual ~ExpertGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // full [E * n] = the ranks' shards [n] in rank order (the routing counts, as float64).
  virtual void all_gather(const Tensor& shard, const Tensor& full) = 0;
  // send's runs (send_counts[j] elements to rank j) into recv's (recv_counts[i] from rank
  // i), dist::Communicator::all_to_all_v's semantics.
  virtual void all_to_all_v(const Tensor& send, const std::vector<int64_t>& send_counts, const Tensor& recv,
                            const std::vector<int64_t>& recv_counts) = 0;
};

// Why `cfg` cannot split its experts over `expert` ranks (a dense model, or a count that
// does not divide the experts), as a sentence naming the model key; nullopt when it can.
std::optional<std::string> expert_parallel_problem(const LlamaConfig& cfg, int64_t expert);

// The most (token, choice) rows an expert rank can receive from a micro-batch of N tokens
// per rank: every rank's every token choosing min(k, n/E) of its experts (a token picks an
// expert at most once). What the expert-side buffers are sized for (dropless: any routing
// fits, with no allocation inside a step).
int64_t max_received_rows(const LlamaConfig& cfg, int64_t tokens);

}  // namespace fsdp::model
