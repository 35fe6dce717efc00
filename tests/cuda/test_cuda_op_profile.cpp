// The op profiler (fsdp/core/op_profile.h) on a CUDA device: one Llama forward + backward
// on the device makes exactly the op calls the CPU model makes (the same front ends, the
// same counts per op), each timed by an event pair (times only > 0: the emulator's are
// host wall time), and profiling makes the host wait for the device only in report().
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "cuda_test_util.h"
#include "fsdp/core/op_profile.h"
#include "fsdp/model/decoder.h"
#include "fsdp/model/param_init.h"
#include "fsdp/model/local_params.h"
#include "fsdp/ops/elementwise.h"

namespace fsdp::test {
namespace {

class CudaOpProfile : public CudaOps {
 protected:
  void SetUp() override {
    CudaOps::SetUp();
    op_profile::reset();
  }
  void TearDown() override {
    op_profile::enable(false);
    op_profile::reset();
  }
};

// One forward + backward of the tiny preset (GQA 4:2, 4 layers) at B=2, T=9 on `device`,
// profiled; the report's rows.
std::vector<op_profile::OpTime> profiled_step(Device device) {
  model::LlamaConfig cfg = model::llama_preset("tiny");
  const int64_t B = 2, T = 9;
  model::Llama llama(cfg, DType::F32, device);
  model::LocalParams params(llama.units(), DType::F32, device);
  for (int u = 0; u < int(llama.units().size()); ++u) {
    Tensor host = Tensor::empty({llama.units()[u].numel}, DType::F32);
    model::init_unit(llama.units()[u], u, /*seed=*/7, /*init_std=*/0.02, host);
    params.params(u).copy_(host);
  }
  model::LlamaActivations act(cfg, B, T, DType::F32, device);
  Tensor ids = Tensor::empty({B * T}, DType::I32), targets = Tensor::empty({B * T}, DType::I32);
  for (int64_t i = 0; i < B * T; ++i) {
    ids.set({i}, double((i * 37) % cfg.vocab_size));
    targets.set({i}, double((i * 53 + 1) % cfg.vocab_size));
  }
  act.ids.copy_(ids);
  act.targets.copy_(targets);

  op_profile::reset();
  op_profile::enable(true);
  const model::LossSum loss = llama.forward_backward(act, params, 1.0 / double(B * T));
  op_profile::enable(false);
  EXPECT_EQ(loss.tokens, B * T);
  EXPECT_TRUE(std::isfinite(loss.sum));
  return op_profile::report();
}

TEST_F(CudaOpProfile, LlamaStepMakesTheCpuModelsCallsOnTheDevice) {
  std::map<std::string, int64_t> cpu_calls, gpu_calls;
  for (const auto& r : profiled_step(Device::cpu())) cpu_calls[r.op] = r.calls;
  const auto gpu_rows = profiled_step(kGpu);
  for (const auto& r : gpu_rows) {
    gpu_calls[r.op] = r.calls;
    EXPECT_GT(r.total_ms, 0.0) << r.op;
  }
  EXPECT_EQ(gpu_calls, cpu_calls);
  // The step's shape in calls: 4 layers, so 4 attention forwards and backwards, and every
  // GEMM of the step (per layer 4 forward, 8 backward; the head 1 + 2).
  EXPECT_EQ(gpu_calls["attention_forward"], 4);
  EXPECT_EQ(gpu_calls["attention_backward"], 4);
  EXPECT_EQ(gpu_calls["cross_entropy"], 1);
  EXPECT_GE(gpu_calls["matmul"], 4 * 12 + 3);
}

TEST_F(CudaOpProfile, EventsAreReadOnlyByTheReport) {
  if (!can_count_host_waits()) GTEST_SKIP() << "counting host waits needs the emulator";
  const Tensor x = on_gpu(input(1000, DType::F32, 3));
  const Tensor y = on_gpu(input(1000, DType::F32, 4));
  const Tensor z = Tensor::empty({1000}, DType::F32, kGpu);
  op_profile::enable(true);
  const unsigned long long before = host_waits();
  for (int i = 0; i < 50; ++i) {
    add(x, y, z);
    scale_(z, 0.5);
  }
  EXPECT_EQ(host_waits(), before) << "profiling made the host wait for the device per op";
  const auto rows = op_profile::report();
  EXPECT_GT(host_waits(), before);  // the report waits for the recorded events
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& r : rows) {
    EXPECT_EQ(r.calls, 50) << r.op;
    EXPECT_GT(r.total_ms, 0.0) << r.op;
  }
  // Read once: a second report has the same totals and waits for nothing new.
  const auto again = op_profile::report();
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].total_ms, rows[0].total_ms);
}

}  // namespace
}  // namespace fsdp::test
