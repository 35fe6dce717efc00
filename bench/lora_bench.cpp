// Full fine-tuning vs LoRA vs QLoRA on the CPU backend (bench/README.md, "LoRA and QLoRA"):
//   1. the ~58M-parameter model of step_bench (hidden 512, 8 layers, vocab 32000), one
//      process: ms/step (the fastest of the timed steps: on a shared machine the minimum is
//      the figure other jobs disturb least) and its ratio to full fine-tuning, the engine's
//      persistent sharded state (master, gradient, AdamW moments, frozen base) and the
//      allocator's peak over a step, all measured;
//   2. the Llama 2 7B shape, computed from the layouts without allocating: persistent
//      sharded state per rank on 4 and 8 ranks (16 bytes per trainable element, the frozen
//      bytes as stored), the NF4 bytes per quantized parameter, and the adapters' share.
// Activations and gathered buffers are the same for all three (the plan of issue 14 adds
// them); what LoRA changes is the persistent state and the backward's dW GEMMs.
//
//   build/bench/lora_bench [steps]        (default 3 timed steps after 2 warm-up steps)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "fsdp/config/config.h"
#include "fsdp/core/allocator.h"
#include "fsdp/fsdp/shard_math.h"
#include "fsdp/model/peft.h"
#include "fsdp/train/trainer.h"

namespace {

struct Case {
  std::string name;
  std::vector<std::string> overrides;
};

const std::vector<std::string> k58M = {"model.preset=tiny",        "model.vocab_size=32000",   "model.hidden_size=512",
                                       "model.intermediate_size=1408", "model.num_layers=8",    "model.num_heads=8",
                                       "model.num_kv_heads=8",     "train.seq_len=512",        "train.micro_batch_size=4",
                                       "logging.metrics=false",    "train.max_steps=1000",     "checkpoint.resume=none"};
const std::vector<std::string> kLora = {"lora.enabled=true", "lora.rank=16", "lora.alpha=32", "lora.targets=all-linear"};

double mib(double bytes) { return bytes / double(1 << 20); }

void measured(int steps) {
  std::vector<Case> cases = {{"full fine-tuning", {}}, {"LoRA r=16 all-linear", kLora}};
  cases.push_back({"QLoRA (NF4 base) r=16 all-linear", kLora});
  cases.back().overrides.push_back("model.quantization=nf4");
  std::printf("58M model (hidden 512, 8 layers, vocab 32000), 4 x 512 tokens/step, one process:\n");
  std::printf("%-34s %10s %8s %14s %14s %14s\n", "", "ms/step", "vs full", "trainable", "state MiB", "peak MiB");
  double full_ms = 0;
  for (const Case& c : cases) {
    std::vector<std::string> o = k58M;
    o.insert(o.end(), c.overrides.begin(), c.overrides.end());
    auto groups = fsdp::dist::local_process_groups();
    fsdp::train::Trainer t(fsdp::config::load_config_string("data:\n  source: synthetic\n", "lora_bench", o), groups);
    for (int i = 0; i < 2; ++i) t.train_step();
    double ms = 1e300, peak = 0;
    for (int i = 0; i < steps; ++i) {
      const auto m = t.train_step();
      ms = std::min(ms, m.step_ms);
      peak = std::max(peak, double(m.peak_tensor_bytes));
    }
    if (full_ms == 0) full_ms = ms;
    int64_t trainable = 0;
    for (const auto& u : t.model().units()) trainable += u.numel;
    std::printf("%-34s %10.1f %7.2fx %14lld %14.1f %14.1f\n", c.name.c_str(), ms, ms / full_ms, (long long)trainable,
                mib(double(t.engine().persistent_bytes())), mib(peak));
  }
}

void seven_b() {
  const fsdp::model::LlamaConfig cfg = fsdp::model::llama_preset("llama2_7b");
  fsdp::model::PeftSpec lora;
  lora.lora.enabled = true;
  lora.lora.rank = 16;
  lora.lora.alpha = 8;
  lora.lora.targets = {"all-linear"};
  lora.frozen_dtype = fsdp::DType::BF16;
  fsdp::model::PeftSpec qlora = lora;
  qlora.quantization = fsdp::model::Quantization::Nf4;
  qlora.nf4_value_dtype = fsdp::DType::F16;
  struct Layout {
    const char* name;
    std::vector<fsdp::model::UnitLayout> units;
  };
  const Layout layouts[] = {{"full fine-tuning", fsdp::model::llama_units(cfg)},
                            {"LoRA r=16 all-linear, bf16 base", fsdp::model::lora_units(cfg, lora)},
                            {"QLoRA r=16 all-linear, NF4 base", fsdp::model::lora_units(cfg, qlora)}};
  std::printf("\nLlama 2 7B shape (6.74B parameters), persistent sharded state per rank (FULL_SHARD):\n");
  std::printf("%-34s %14s %14s %14s %14s\n", "", "trainable", "frozen GB", "4 ranks GB", "8 ranks GB");
  for (const Layout& l : layouts) {
    int64_t trainable = 0, frozen = 0, nf4_params = 0, nf4_bytes = 0;
    for (const auto& u : l.units) {
      trainable += u.numel;
      frozen += u.frozen_bytes;
      for (const auto& f : u.frozen)
        if (f.format == fsdp::model::FrozenFormat::Nf4) nf4_params += f.numel, nf4_bytes += f.bytes;
    }
    auto per_rank = [&](int n) {
      double b = 0;
      for (const auto& u : l.units) {
        if (u.numel > 0) b += 16.0 * double(fsdp::shard_range(u.numel, n, 0).size);
        if (u.frozen_bytes > 0) b += double(fsdp::shard_range(u.frozen_bytes, n, 0).size);
      }
      return b / 1e9;
    };
    std::printf("%-34s %14lld %14.2f %14.2f %14.2f\n", l.name, (long long)trainable, double(frozen) / 1e9,
                per_rank(4), per_rank(8));
    if (nf4_params > 0)
      std::printf("%-34s %.4f bytes per quantized parameter (%lld parameters, %.3f GB with statistics)\n", "",
                  double(nf4_bytes) / double(nf4_params), (long long)nf4_params, double(nf4_bytes) / 1e9);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::stoi(argv[1]) : 3;
  measured(steps);
  seven_b();
  return 0;
}
