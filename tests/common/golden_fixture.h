// Reading the Hugging Face golden fixtures (tests/golden/<model>/expected.safetensors,
// written by tests/golden/generate_*.py), shared by the CPU and CUDA golden tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fsdp/ckpt/hf_import.h"
#include "fsdp/ckpt/safetensors.h"
#include "fsdp/model/decoder.h"
#include "fsdp/model/local_params.h"
#include "fsdp/core/tensor.h"
#include "fsdp/ops/cross_entropy.h"
#include "../cpu/test_util.h"

namespace fsdp::test {

// The fixture's tensor as a flat float64 CPU tensor.
inline Tensor expected_tensor(const ckpt::SafetensorsFile& f, const std::string& name) {
  const std::vector<float> v = ckpt::read_as_f32(f.entry(name));
  Tensor t = Tensor::empty({int64_t(v.size())}, DType::F64);
  for (size_t i = 0; i < v.size(); ++i) t.set_flat(int64_t(i), v[i]);
  return t;
}

// The fixture's batch as the model takes it: ids [B*T] and next-token targets (labels
// shifted left by one, kIgnoreIndex in each row's last slot: what transformers' causal-LM
// loss does), int32 on the host.
struct GoldenBatch {
  int64_t B = 0, T = 0;
  Tensor ids, targets;
};

inline GoldenBatch golden_batch(const ckpt::SafetensorsFile& f) {
  GoldenBatch g;
  const auto shape = f.entry("input_ids").shape;
  g.B = shape[0];
  g.T = shape[1];
  const auto in = ckpt::read_as_i64(f.entry("input_ids"));
  const auto labels = ckpt::read_as_i64(f.entry("labels"));
  g.ids = Tensor::empty({g.B * g.T}, DType::I32);
  g.targets = Tensor::empty({g.B * g.T}, DType::I32);
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t t = 0; t < g.T; ++t) {
      g.ids.set({b * g.T + t}, double(in[size_t(b * g.T + t)]));
      g.targets.set({b * g.T + t}, t + 1 < g.T ? double(labels[size_t(b * g.T + t + 1)]) : double(kIgnoreIndex));
    }
  return g;
}

// One golden model folder opened: config, reference tensors, the batch, and its weights
// loaded (on the host in float32, then in any dtype on any device).
struct GoldenModel {
  explicit GoldenModel(const std::string& folder)
      : dir(folder), cfg(ckpt::read_hf_llama_config(dir)), ref(dir + "/expected.safetensors"), batch(golden_batch(ref)),
        B(batch.B), T(batch.T), ids(batch.ids), targets(batch.targets) {}

  std::unique_ptr<model::LocalParams> params(const model::Llama& llama, DType dtype, Device device) const {
    auto p = std::make_unique<model::LocalParams>(llama.units(), dtype, device);
    const ckpt::SafetensorsFolder folder(dir);
    for (int u = 0; u < int(llama.units().size()); ++u) {
      Tensor host = Tensor::empty({llama.units()[size_t(u)].numel}, DType::F32);
      ckpt::load_hf_unit(folder, llama.units()[size_t(u)], host);
      p->params(u).copy_(host);
    }
    return p;
  }

  std::string dir;
  model::LlamaConfig cfg;
  ckpt::SafetensorsFile ref;
  GoldenBatch batch;
  int64_t B, T;
  Tensor ids, targets;
};

// A test fixture over one golden model folder: its config, its expected.safetensors, and
// the batch placed into a model's activations. A derived fixture calls open() in SetUp.
class GoldenModelTest : public ::testing::Test {
 protected:
  void open(const std::string& dir) {
    dir_ = dir;
    cfg_ = ckpt::read_hf_llama_config(dir_);
    expected_ = std::make_unique<ckpt::SafetensorsFile>(dir_ + "/expected.safetensors");
  }

  Tensor expected(const std::string& name) const { return expected_tensor(*expected_, name); }

  // Every parameter gradient in `params` against the fixture's grad.<hf name>, each within
  // `tolerance` (norm-wise, rel_error of test_util.h); how many were compared and the worst.
  struct GradientCheck {
    int checked = 0;
    double worst = 0;
  };
  GradientCheck expect_every_gradient(const model::Llama& llama, model::LocalParams& params, double tolerance) const {
    GradientCheck r;
    for (int u = 0; u < int(llama.units().size()); ++u) {
      const model::UnitLayout& unit = llama.units()[u];
      for (const auto& p : unit.params) {
        const double err = rel_error(unit.view(params.grads(u), p.name), expected("grad." + p.hf_name));
        EXPECT_LT(err, tolerance) << p.hf_name;
        r.worst = std::max(r.worst, err);
        ++r.checked;
      }
    }
    return r;
  }

  // ids [B*T] and next-token targets (golden_batch) into the activations.
  void load_batch(model::LlamaActivations& act) const {
    const GoldenBatch g = golden_batch(*expected_);
    ASSERT_EQ(g.B * g.T, act.batch * act.seq_len);
    act.ids.copy_(g.ids);
    act.targets.copy_(g.targets);
  }

  std::string dir_;
  model::LlamaConfig cfg_;
  std::unique_ptr<ckpt::SafetensorsFile> expected_;
};

}  // namespace fsdp::test
