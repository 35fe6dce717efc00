// A crash-safe export folder; see export_folder.h.
#include "export_folder.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "durable_file.h"
#include "fsdp/core/error.h"

namespace fsdp::ckpt::detail {

namespace fs = std::filesystem;

namespace {

std::string strip_trailing_slashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

}  // namespace

ExportFolder::ExportFolder(const std::string& out_dir, bool overwrite) : overwrite_(overwrite) {
  FSDP_CHECK(!out_dir.empty(), "export: empty output folder name");
  out_ = strip_trailing_slashes(out_dir);
  std::error_code ec;
  if (fs::exists(out_, ec)) {
    FSDP_CHECK(fs::is_directory(out_, ec), "export folder {} exists and is not a directory", out_.string());
    FSDP_CHECK(overwrite || (fs::is_empty(out_, ec) && !ec),
               "export folder {} exists and is not empty; refusing to overwrite it (choose a new folder, or "
               "--overwrite to replace it)",
               out_.string());
  }
  parent_ = out_.has_parent_path() ? out_.parent_path() : fs::path(".");
  fs::create_directories(parent_, ec);
  FSDP_CHECK(!ec && fs::is_directory(parent_), "cannot create the parent folder {} of export folder {}: {}",
             parent_.string(), out_.string(), ec ? ec.message() : "not a directory");
  tmp_ = fs::path(out_.string() + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp_, ec);  // a leftover of this very pid (a crashed earlier run)
  FSDP_CHECK(::mkdir(tmp_.c_str(), 0755) == 0, "cannot create {} (to export into {}): {}", tmp_.string(),
             out_.string(), std::strerror(errno));
}

ExportFolder::~ExportFolder() {
  std::error_code ec;
  if (!committed_) fs::remove_all(tmp_, ec);
}

void ExportFolder::commit() {
  fsync_dir(tmp_);
  // --overwrite: the old folder steps aside only now that the new one is complete, and is
  // removed once the new one is in place.
  std::error_code ec;
  fs::path old;
  if (overwrite_ && fs::exists(out_, ec) && !fs::is_empty(out_, ec)) {
    old = fs::path(out_.string() + ".replaced-" + std::to_string(::getpid()));
    fs::remove_all(old, ec);
    FSDP_CHECK(::rename(out_.c_str(), old.c_str()) == 0, "cannot move {} aside to {}: {}", out_.string(),
               old.string(), std::strerror(errno));
  }
  // rename(2) replaces an empty folder atomically, and only an empty one.
  FSDP_CHECK(::rename(tmp_.c_str(), out_.c_str()) == 0, "cannot rename {} to {}: {}", tmp_.string(), out_.string(),
             std::strerror(errno));
  committed_ = true;
  fsync_dir(parent_);
  if (!old.empty()) fs::remove_all(old, ec);
}

std::string encode_weights(const float* src, int64_t n, DType dtype, const std::string& name) {
  for (int64_t i = 0; i < n; ++i) {
    FSDP_CHECK(std::isfinite(src[i]), "export: tensor '{}' has the non-finite value {} at element {}; refusing to "
               "export it", name, src[i], i);
  }
  std::string out(size_t(n) * dtype_size(dtype), '\0');
  if (dtype == DType::F32) {
    std::memcpy(out.data(), src, out.size());
    return out;
  }
  auto* dst = reinterpret_cast<bf16*>(out.data());
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = float_to_bf16(src[i]);
    FSDP_CHECK(std::isfinite(bf16_to_float(dst[i])),
               "export: tensor '{}' element {} = {} overflows bfloat16; export as float32", name, i, src[i]);
  }
  return out;
}

}  // namespace fsdp::ckpt::detail
