// Opening files that users name (configs, model folders, checkpoints, token shards,
// manifests, adapters, tokenizers, metrics.jsonl, traces, prepare's inputs) without trusting
// what they are. open(2) of a FIFO blocks until some other process opens it for writing, so
// a named pipe planted where a file should be hangs a job forever; /dev/zero never ends; a
// directory, socket or device is never the data a reader expects. These open with
// O_NONBLOCK (which returns at once for a FIFO), check the type with fstat, and only then
// read; anything but a regular file (after symlinks) is refused by name.
//
// The one rule for every reader: a path from the user is opened through here, never with
// std::ifstream, fopen or open(2) directly (tests/integration/readers_use_regular_file.sh
// holds the sources to it).
#pragma once

#include <cstdio>
#include <string>

namespace fsdp {

// A read-only descriptor (O_CLOEXEC, blocking again) of the regular file at `path`; the
// caller closes it. Throws fsdp::Error: "cannot open <path>: <strerror>" or
// "<path> is a FIFO (named pipe), not a regular file" (a directory, a socket, a device).
int open_regular_file(const std::string& path);

// The same without throwing: -1, and `why` the reason without the path ("No such file or
// directory", "it is a FIFO (named pipe), not a regular file"), for callers whose message
// has a form of its own.
int open_regular_file(const std::string& path, std::string& why);

// The whole content of the regular file at `path` (same checks and errors).
std::string read_regular_file(const std::string& path);

// The regular file at `path` as a stdio stream (same checks and errors); the caller fcloses
// it. `mode` is "rb" (read), or "w" / "a" (write, created when missing; truncated or
// appended to): a FIFO where an output file should be blocks a writer just as well.
std::FILE* open_regular_file_stream(const std::string& path, const char* mode = "rb");

}  // namespace fsdp
