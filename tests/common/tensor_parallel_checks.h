// What the tensor- and expert-parallel tests (tests/mpi/test_tensor_parallel*.cpp,
// test_expert_parallel*.cpp and the CUDA one in tests/cuda_mpi) share: a whole parameter put
// together from every tensor rank's slice, the files of a checkpoint or export folder, and
// the check that a parallel run's checkpoint exports one process's Hugging Face folder.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "fsdp/ckpt/manifest.h"
#include "fsdp/core/tensor.h"
#include "fsdp/model/param_units.h"
#include "fsdp/model/tensor_parallel.h"
#include "fsdp/train/checkpoint_export.h"

namespace fsdp::test {

// The whole parameter of slot `s` from every tensor rank's slice of `local` (this rank's
// unit gathered over its shard group, on the host); `group` null or a replicated slot:
// this rank's values as they are.
inline Tensor whole_parameter(const model::ParamSlot& s, const Tensor& local, model::TensorGroup* group) {
  const Tensor mine = local.narrow(0, s.offset, s.numel).clone();
  if (group == nullptr || s.tp.replicated()) return mine;
  const int T = group->size();
  const Tensor all = Tensor::empty({int64_t(T) * s.numel}, DType::F32);
  group->all_gather(mine, all);
  const Tensor out = Tensor::zeros({int64_t(T) * s.numel}, DType::F32);
  model::ParamSlot slice = s;
  for (int r = 0; r < T; ++r) {
    slice.tp.index = r;
    for (int64_t i = 0; i < s.numel; ++i) out.set_flat(slice.whole_index(i), all.get_flat(int64_t(r) * s.numel + i));
  }
  return out;
}

// <dir>/checkpoints/step_N.
inline std::string checkpoint_step_dir(const std::string& dir, int step) {
  return (std::filesystem::path(dir) / "checkpoints" / ckpt::checkpoint_name(step)).string();
}

// Every file of a folder, by name, and its bytes.
inline std::map<std::string, std::string> folder_bytes(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream f(e.path(), std::ios::binary);
    out[e.path().filename().string()] = std::string(std::istreambuf_iterator<char>(f), {});
  }
  return out;
}

// Exports `parallel` and `one` (checkpoint step folders) into <out>/hf_parallel and
// <out>/hf_one (as `as`: a Hugging Face folder, or a LoRA run's PEFT adapter) and expects
// the two folders byte for byte equal; `what` names the layout in failures. One process's
// call (the exports read every rank's files).
inline void expect_exports_equal(const std::string& parallel, const std::string& one, const std::string& out,
                                 const std::string& what, train::ExportAs as = train::ExportAs::Model) {
  for (const auto& [from, to] : {std::pair{parallel, out + "/hf_parallel"}, {one, out + "/hf_one"}}) {
    train::ExportRequest r;
    r.checkpoint = from;
    r.output = to;
    r.as = as;
    train::export_checkpoint(r);
  }
  const auto a = folder_bytes(out + "/hf_parallel"), b = folder_bytes(out + "/hf_one");
  EXPECT_EQ(a.size(), b.size());
  for (const auto& [name, bytes] : b) {
    if (!a.count(name)) {
      ADD_FAILURE() << name << " missing from the " << what << " run's export";
      continue;
    }
    EXPECT_TRUE(a.at(name) == bytes) << name << " differs";
  }
}

}  // namespace fsdp::test
