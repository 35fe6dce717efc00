// Which layouts the trainer builds yet, for the plan's proposals (memory_plan_search.cpp):
// `plan` and the start-up refusal never propose a layout `train` would refuse. Each layout
// not built yet is one constant below, the twin of one refusal naming parallel.expert in
// train/setup.cpp; tests/cpu/test_memory_plan_expert.cpp holds each to its refusal, so
// lifting a refusal there fails that test until its constant here is flipped to true (and
// its branch in trainable_layout.cpp goes).
#pragma once

#include <optional>
#include <string>

#include "fsdp/config/config.h"

namespace fsdp::plan {

// Expert parallelism with LoRA and parallel.tensor > 1 together: refused by
// train::rank_model_config ("LoRA under expert and tensor parallelism together is not
// built yet").
inline constexpr bool kExpertParallelLoraWithTensorBuilt = false;

// Why `cfg` cannot train as laid out: the layout not built yet, in a sentence naming
// parallel.expert; nullopt when the trainer builds it. The mesh's own rules (E divides the
// experts and the shard group) are dist::mesh_problem's, not this.
std::optional<std::string> unbuilt_layout(const config::Config& cfg);

}  // namespace fsdp::plan
