// Writing a small text file so that a reader never sees half of it: the text goes to
// <path>.tmp, which is renamed over <path> once complete (no fsync: traces and snapshots
// are diagnostics, not state a crash must not lose; checkpoints use ckpt's durable files).
#pragma once

#include <string>
#include <string_view>

namespace fsdp {

// Throws fsdp::Error naming the file and the system's reason when it cannot.
void write_text_file(const std::string& path, std::string_view text);

}  // namespace fsdp
