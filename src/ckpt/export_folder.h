// Private to src/ckpt: an export folder written crash-safely, shared by the Hugging Face
// model export (hf_export.cpp) and the PEFT adapter export (peft_adapter.cpp). Everything
// goes into <out>.tmp-<pid>, fsync'd, and commit() renames it to <out>; an ExportFolder
// destroyed before commit() removes the temporary folder, so <out> is either absent (or the
// empty folder it was) or complete. An <out> that exists and is not empty is refused before
// anything is written.
#pragma once

#include <filesystem>
#include <string>

#include "fsdp/core/dtype.h"

namespace fsdp::ckpt::detail {

class ExportFolder {
 public:
  // overwrite: a non-empty <out> is replaced at commit() instead of refused.
  ExportFolder(const std::string& out_dir, bool overwrite);
  ~ExportFolder();
  ExportFolder(const ExportFolder&) = delete;
  ExportFolder& operator=(const ExportFolder&) = delete;

  const std::filesystem::path& tmp() const { return tmp_; }  // write the files here
  void commit();  // fsync, rename into place, fsync the parent

 private:
  std::filesystem::path out_, parent_, tmp_;
  bool overwrite_ = false;
  bool committed_ = false;
};

// `n` float32 values as the bytes of a float32 or bfloat16 tensor (round to nearest even),
// refusing a non-finite value or a bfloat16 overflow by the tensor's name.
std::string encode_weights(const float* src, int64_t n, DType dtype, const std::string& name);

}  // namespace fsdp::ckpt::detail
