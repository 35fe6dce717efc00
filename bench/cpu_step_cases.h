// The CPU training-step cases the benchmarks share (step_bench, trace_bench): the tiny
// preset and a 58M-parameter Llama whose step is GEMM-bound, so bench/README.md's figures
// for both benches are of the same steps.
#pragma once

#include <string>
#include <vector>

namespace bench {

struct StepCase {
  std::string name;
  std::vector<std::string> overrides;  // --set style, on top of the defaults
};

inline std::vector<StepCase> cpu_step_cases() {
  return {
      {"tiny (1.0M params, seq 128, 16x128 tokens/step)",
       {"model.preset=tiny", "train.seq_len=128", "train.micro_batch_size=16"}},
      {"llama-50M (58M params, seq 512, 4x512 tokens/step)",
       {"model.preset=tiny", "model.vocab_size=32000", "model.hidden_size=512", "model.intermediate_size=1408",
        "model.num_layers=8", "model.num_heads=8", "model.num_kv_heads=8", "train.seq_len=512",
        "train.micro_batch_size=4"}},
  };
}

// The case's overrides plus what a benchmark run needs: no metrics file, no checkpoint to
// resume from (whatever the working directory holds), steps to spare.
inline std::vector<std::string> bench_overrides(const StepCase& c) {
  std::vector<std::string> o = c.overrides;
  o.push_back("logging.metrics=false");
  o.push_back("checkpoint.resume=none");
  o.push_back("train.max_steps=100000");
  return o;
}

}  // namespace bench
