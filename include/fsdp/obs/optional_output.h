// Outputs a run can go on without: traces, memory snapshots and TensorBoard files
// (logging.profile_*, memory_snapshot_step, tensorboard). One that cannot be written is
// reported once, as one line naming the key and the path, and training goes on without
// it; with logging.strict: true the same line stops the run (exit 1).
#pragma once

#include <string>

#include "fsdp/config/config.h"

namespace fsdp::obs {

// Creates `dir` and writes and removes a probe file in it: "" when that works, else what
// went wrong ("cannot create /x/traces: Permission denied").
std::string probe_output_dir(const std::string& dir);

// Reports a failed output: under logging.strict throws fsdp::Error(`message` + that the
// run stops); otherwise logs `message` as an error with "training goes on without it".
void output_failed(const config::Config& cfg, const std::string& message);

}  // namespace fsdp::obs
