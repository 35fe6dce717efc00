// A mixture-of-experts training step on the CPU backend (bench/moe_bench.sh compares it with
// transformers' MixtralForCausalLM on the same machine and threads): ms/step and tokens/s
// for a small Mixtral, and the share of the step spent in the MoE-specific ops (router,
// permutation, gather, combine and their backward) from the op profiler, whose target is
// under 10% (the rest is the GEMMs, attention and norms every model has).
//
//   build/bench/moe_step_bench [steps]     (default 3 timed steps after 1 warm-up step)
// The shape is printed first; MOE_BENCH_SHAPE=small shrinks it for a quick run.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fsdp/config/config.h"
#include "fsdp/core/op_profile.h"
#include "fsdp/train/trainer.h"

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::stoi(argv[1]) : 3;
  const bool small = std::getenv("MOE_BENCH_SHAPE") != nullptr && std::string(std::getenv("MOE_BENCH_SHAPE")) == "small";
  // hidden 512, 8 experts of 1408, top-2, 4 layers, 8 heads, vocab 32000; 4 x 256 tokens.
  std::vector<std::string> o = {"model.preset=tiny_moe",       "model.vocab_size=32000",  "model.hidden_size=512",
                                "model.intermediate_size=1408", "model.num_layers=4",      "model.num_heads=8",
                                "model.num_kv_heads=8",         "model.max_seq_len=512",   "train.seq_len=256",
                                "train.micro_batch_size=4",     "logging.metrics=false",   "train.max_steps=1000",
                                "data.source=synthetic",        "checkpoint.resume=none",  "run.dir=/tmp/moe_step_bench"};
  if (small) {
    for (const char* s : {"model.hidden_size=128", "model.intermediate_size=352", "model.num_heads=4",
                          "model.num_kv_heads=4", "model.vocab_size=1024", "train.seq_len=64"})
      o.push_back(s);
  }
  auto groups = fsdp::dist::local_process_groups();
  fsdp::train::Trainer trainer(fsdp::config::load_config_string("data:\n  source: synthetic\n", "moe_step_bench", o), groups);
  std::printf("model: %s\n", trainer.model().config().summary().c_str());
  trainer.train_step();  // warm-up: first-use allocations
  double ms = 0, tok = 0;
  fsdp::op_profile::reset();
  fsdp::op_profile::enable(true);
  for (int i = 0; i < steps; ++i) {
    const auto m = trainer.train_step();
    ms += m.step_ms / steps;
    tok += m.tokens_per_sec / steps;
  }
  fsdp::op_profile::enable(false);
  double all_ms = 0, moe_ms = 0;
  for (const auto& r : fsdp::op_profile::report()) {
    all_ms += r.total_ms;
    if (r.op.rfind("moe_", 0) == 0) moe_ms += r.total_ms;
  }
  const double step_total = ms * steps;
  std::printf("fsdp_train: %.1f ms/step, %.0f tokens/s\n", ms, tok);
  std::printf("moe ops (router, permutation, gather, combine, their backward): %.1f%% of the step (%.1f of %.1f ms "
              "over %d steps; all profiled ops %.1f ms)\n",
              100.0 * moe_ms / step_total, moe_ms, step_total, steps, all_ms);
  return 0;
}
