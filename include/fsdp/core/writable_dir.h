// The start-up proof that an output directory can be written: a run that would fail at its
// first checkpoint (with the default interval: after the whole run) or at its first
// metrics line fails before its first step instead. Any output (run.dir, checkpoint.dir,
// traces, TensorBoard event files) calls it once at start-up with the config key that
// named the directory.
#pragma once

#include <string>
#include <string_view>

namespace fsdp {

// Creates `dir` and its parents when missing, then creates, writes, fsyncs and removes a
// probe file in it (".fsdp_write_probe.<host>.<pid>", so ranks on any node may probe the
// same directory at once). Throws fsdp::Error naming `key` and the directory:
//   "checkpoint.dir /ro/ckpt: cannot create it: Read-only file system"
//   "run.dir runs/x is a file, not a directory"
//   "run.dir runs/x: cannot write in it: Permission denied"
void ensure_writable_dir(const std::string& dir, std::string_view key);

}  // namespace fsdp
