// `fsdp_train plan --config FILE [--set ...] [--ranks N] [--device-memory SIZE]`: the memory
// plan (memory_plan.h) of a training run per rank, without allocating anything: the bytes
// of each category, the peak and whether it fits, the largest train.micro_batch_size that
// fits, and the fewest ranks per activation checkpointing mode.
#pragma once

namespace fsdp::train {

// argv[0] is "plan". Returns 0 when the run fits, 1 when it does not, 2 for a usage or
// config error.
int plan_main(int argc, char** argv);

const char* plan_help();

}  // namespace fsdp::train
