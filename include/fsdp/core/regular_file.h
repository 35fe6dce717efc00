// Opening files that users name (model folders, checkpoints, token shards, manifests)
// without trusting what they are. open(2) of a FIFO blocks until some other process opens
// it for writing, so a named pipe planted where a shard or model.safetensors should be
// hangs a job forever; a directory, socket or device is never the data a reader expects.
// These open with O_NONBLOCK (which returns at once for a FIFO), check the type with
// fstat, and only then read; anything but a regular file (after symlinks) is an error
// naming the path and what it is.
#pragma once

#include <string>

namespace fsdp {

// A read-only descriptor (O_CLOEXEC, blocking again) of the regular file at `path`; the
// caller closes it. Throws fsdp::Error: "cannot open <path>: <strerror>" or
// "<path> is a FIFO (named pipe), not a regular file" (a directory, a socket, a device).
int open_regular_file(const std::string& path);

// The whole content of the regular file at `path` (same checks and errors).
std::string read_regular_file(const std::string& path);

}  // namespace fsdp
