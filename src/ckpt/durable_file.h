// Private to src/ckpt: the durable-write primitives the safetensors writer, the checkpoint
// commit and the Hugging Face export share. "Durable" = the bytes are fsync'd before a
// rename publishes them, and the directory is fsync'd after, so a crash leaves either the
// old file or the complete new one.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

namespace fsdp::ckpt::detail {

// write(2) until all `n` bytes are written (retrying EINTR); errors name `path`.
void write_all(int fd, const void* data, size_t n, const std::string& path);

// fsync a directory so creations and renames inside it survive a crash.
void fsync_dir(const std::filesystem::path& dir);

// Creates `path` (which must not exist), writes `bytes`, fsyncs and closes it.
void write_file_synced(const std::filesystem::path& path, const std::string& bytes);

// Replaces `path` with `bytes` crash-safely: <path>.tmp written and fsync'd, renamed over
// `path`, parent directory fsync'd. On failure the tmp file is removed and `path` untouched.
void replace_file_durably(const std::filesystem::path& path, const std::string& bytes);

}  // namespace fsdp::ckpt::detail
