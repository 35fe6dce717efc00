// Reading the Hugging Face golden fixtures (tests/golden/<model>/expected.safetensors,
// written by tests/golden/generate_*.py), shared by the CPU and CUDA golden tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/ckpt/safetensors.h"
#include "fsdp/core/tensor.h"
#include "fsdp/ops/cross_entropy.h"

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

}  // namespace fsdp::test
