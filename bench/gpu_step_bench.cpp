// Training steps on one GPU (train.device: cuda, fsdp::train::Trainer on local process
// groups): per case, ms/step, tokens/s, MFU against the GPU's dense bf16 peak (train/
// device_peak.h; FSDP_PEAK_TFLOPS for a GPU the table does not know) and the peak of the
// device allocator; then a second, profiled pass of a few steps (fsdp/core/op_profile.h)
// printing every op's calls and milliseconds per step and its share of the profiled step,
// so each op can be held to its row of the roofline (bench/roofline/roofline.sh, whose
// command for the case's shape is printed with it). bench/README.md, "GPU training step".
//
//   build/bench/gpu_step_bench                       # every default case (sized for an 80 GB H100)
//   build/bench/gpu_step_bench --case llama-1.1b --steps 20 --set train.micro_batch_size=4
//   build/bench/gpu_step_bench --smoke               # tiny model, 2 steps (CI, on the emulator)
//
// Exit status: 0 after every case ran; 2 on a bad command line or without a usable CUDA
// device (nothing is run); 1 when a case failed (the others still run).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "fsdp/config/config.h"
#include "fsdp/config/model_options.h"
#include "fsdp/core/allocator.h"
#include "fsdp/core/cli_args.h"
#include "fsdp/core/cuda.h"
#include "fsdp/core/op_profile.h"
#include "fsdp/dist/communicator.h"
#include "fsdp/model/llama_config.h"
#include "fsdp/train/trainer.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Case {
  std::string name;
  std::vector<std::string> overrides;  // config keys, before --set
};

// bf16 compute, parameters gathered and gradients reduced in bf16, fp32 master weights and
// AdamW moments in the engine: the GPU configuration the roofline assumes.
const std::vector<std::string> kGpuDefaults = {"train.device=cuda", "train.dtype=bfloat16",
                                               "fsdp.param_dtype=bfloat16", "fsdp.reduce_dtype=bfloat16"};

// Sized for one 80 GB H100. llama-1.1b: the TinyLlama shape (GQA 32:4), 1.10B parameters:
// 13 GB of fp32 master weights and moments, 4 GB of bf16 parameters and gradients, ~1.4 MB
// of bf16 activations per token, so 8 x 2048 tokens leave ~35 GB free.
// llama2-7b-8L: Llama 2 7B's layer at the roofline's shape (seq 4096, micro-batch 1), so
// its per-op rows compare with the roofline table call for call (8 of its 32 layers; 1.88B
// parameters, ~30 GB of weights and optimizer state).
std::vector<Case> default_cases() {
  return {
      {"llama-1.1b",
       {"model.vocab_size=32000", "model.hidden_size=2048", "model.intermediate_size=5632", "model.num_layers=22",
        "model.num_heads=32", "model.num_kv_heads=4", "model.max_seq_len=2048", "train.seq_len=2048",
        "train.micro_batch_size=8"}},
      {"llama2-7b-8L",
       {"model.preset=llama2_7b", "model.num_layers=8", "train.seq_len=4096", "train.micro_batch_size=1"}},
      // Two Mixtral 8x7B layers (3.2B parameters, ~60 GB of fp32 state and bf16 copies on
      // one 80 GB GPU): the router, the sort, the per-expert GEMMs and the combine in the
      // per-op table, and the one host wait per MoE layer in ms/step.
      {"mixtral-8x7b-2L",
       {"model.preset=mixtral_8x7b", "model.num_layers=2", "model.max_seq_len=4096", "train.seq_len=4096",
        "train.micro_batch_size=1"}},
  };
}

// The bench's own code path on any device, the emulator included: a tiny model, few steps.
Case smoke_case() {
  return {"smoke",
          {"model.preset=tiny", "model.num_layers=2", "model.max_seq_len=64", "train.seq_len=32",
           "train.micro_batch_size=2"}};
}

struct Options {
  std::vector<Case> cases;
  std::vector<std::string> sets;
  int steps = 10, warmup = 3, profile_steps = 3;
};

const char kUsage[] =
    "usage: gpu_step_bench [--smoke] [--case NAME]... [--steps N] [--warmup N] [--profile-steps N]\n"
    "                      [--set key=value]...\n"
    "  --smoke            the tiny smoke case, 1 warm-up, 2 timed and 1 profiled step (CI)\n"
    "  --case NAME        run this default case only (repeatable): llama-1.1b, llama2-7b-8L, mixtral-8x7b-2L\n"
    "  --steps N          timed steps per case (default 10)\n"
    "  --warmup N         untimed steps first (default 3)\n"
    "  --profile-steps N  steps of the profiled pass (default 3)\n"
    "  --set key=value    a config override for every case, after the case's own\n";

// A whole number >= min_value, or a UsageError naming the flag.
int count(const std::string& flag, const std::string& v, int min_value) {
  size_t used = 0;
  int n = 0;
  try {
    n = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || n < min_value)
    throw fsdp::UsageError{flag + " expects an integer >= " + std::to_string(min_value) + ", got '" + v + "'"};
  return n;
}

Options parse(int argc, char** argv) {
  Options o;
  bool smoke = false;
  std::vector<std::string> names;
  fsdp::ArgCursor args(argc, argv);
  while (args.next()) {
    const std::string& a = args.arg();
    if (a == "--smoke") smoke = true;
    else if (a == "--case") names.push_back(args.value());
    else if (a == "--steps") o.steps = count(a, args.value(), 1);
    else if (a == "--warmup") o.warmup = count(a, args.value(), 0);
    else if (a == "--profile-steps") o.profile_steps = count(a, args.value(), 1);
    else if (a == "--set") o.sets.push_back(args.value());
    else if (a == "--help" || a == "-h") throw fsdp::UsageError{""};
    else throw fsdp::UsageError{"unknown argument '" + args.raw() + "'"};
  }
  if (smoke) {
    o.cases = {smoke_case()};
    o.warmup = 1;
    o.steps = 2;
    o.profile_steps = 1;
  }
  const std::vector<Case> all = default_cases();
  for (const std::string& n : names) {
    const auto it = std::find_if(all.begin(), all.end(), [&](const Case& c) { return c.name == n; });
    if (it == all.end()) throw fsdp::UsageError{"unknown case '" + n + "'"};
    o.cases.push_back(*it);
  }
  if (o.cases.empty()) o.cases = all;
  return o;
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Runs one case: the summary line, then the profiled pass's per-op table.
void run_case(const Case& c, const Options& o, const std::string& run_dir) {
  std::vector<std::string> overrides = kGpuDefaults;
  overrides.insert(overrides.end(), c.overrides.begin(), c.overrides.end());
  for (const char* s : {"logging.metrics=false", "checkpoint.resume=none", "optim.warmup_steps=1"})
    overrides.push_back(s);
  overrides.push_back("run.dir=" + run_dir);
  overrides.push_back("train.max_steps=" + std::to_string(o.warmup + o.steps + o.profile_steps));
  overrides.insert(overrides.end(), o.sets.begin(), o.sets.end());
  const fsdp::config::Config cfg = fsdp::config::load_config_string("data:\n  source: synthetic\n", "gpu_step_bench", overrides);
  const fsdp::model::LlamaConfig shape = fsdp::config::resolve_model_config(cfg.model);

  auto groups = fsdp::dist::local_process_groups();
  fsdp::train::Trainer trainer(cfg, groups);
  const fsdp::Device dev = trainer.device();
  const int64_t tokens_per_step =
      int64_t(cfg.train.micro_batch_size) * cfg.train.seq_len * cfg.train.grad_accum_steps;
  const double params = double(shape.num_parameters());
  char count[32];
  std::snprintf(count, sizeof count, params >= 1e9 ? "%.2fB" : "%.1fM", params >= 1e9 ? params / 1e9 : params / 1e6);
  std::printf("\n== %s: %s parameters (hidden %lld, intermediate %lld, %lld layers, %lld/%lld heads, vocab %lld), "
              "seq %d x micro-batch %d x accum %d = %lld tokens/step, %s on %s (%s)\n",
              c.name.c_str(), count, (long long)shape.hidden_size,
              (long long)shape.intermediate_size, (long long)shape.num_layers, (long long)shape.num_heads,
              (long long)shape.num_kv_heads, (long long)shape.vocab_size, cfg.train.seq_len,
              cfg.train.micro_batch_size, cfg.train.grad_accum_steps, (long long)tokens_per_step,
              fsdp::dtype_name(cfg.train.dtype), dev.str().c_str(),
              fsdp::cuda::device_name(dev.index).c_str());

  for (int i = 0; i < o.warmup; ++i) trainer.train_step();
  // The trainer's own step time and MFU (the host waits for the GPU at each step's
  // gradient norm, so a step's time includes its device work but for the AdamW kernels,
  // which the next step's time absorbs); the peak is the device allocator's, per step.
  double step_ms = 0, mfu_ms = 0;
  bool have_mfu = true;
  uint64_t peak = 0;
  for (int i = 0; i < o.steps; ++i) {
    const fsdp::obs::StepMetrics m = trainer.train_step();
    step_ms += m.step_ms / o.steps;
    if (m.mfu) mfu_ms += *m.mfu * m.step_ms / o.steps;  // mfu x step time: constant for a step's FLOPs
    else have_mfu = false;
    peak = std::max<uint64_t>(peak, m.peak_tensor_bytes);
  }
  char mfu[64] = "n/a (unknown GPU peak; set FSDP_PEAK_TFLOPS)";
  if (have_mfu) std::snprintf(mfu, sizeof mfu, "%.1f%%", 100.0 * mfu_ms / step_ms);
  // MFU last: without a known peak it is a sentence, not a number.
  std::printf("%-14s %10s %12s %22s  %s\n", "case", "ms/step", "tokens/s", "peak device memory", "MFU");
  std::printf("%-14s %10.1f %12.0f %11.2f GiB (%3.0f%%)  %s\n", c.name.c_str(), step_ms,
              double(tokens_per_step) / step_ms * 1e3, double(peak) / double(1ull << 30),
              100.0 * double(peak) / double(fsdp::cuda::device_memory_bytes(dev.index)), mfu);
  std::printf("   (%d timed steps after %d warm-up; device memory: the tensors' allocator peak, not counting the\n"
              "    CUDA context and cuBLASLt's workspace)\n",
              o.steps, o.warmup);

  // The profiled pass: its own wall time, with the device drained at both ends, is the
  // denominator of the table's shares; the profiler's events add a little to it.
  fsdp::cuda::synchronize(dev.index);
  fsdp::op_profile::reset();
  fsdp::op_profile::enable(true);
  const auto t0 = Clock::now();
  for (int i = 0; i < o.profile_steps; ++i) trainer.train_step();
  fsdp::cuda::synchronize(dev.index);
  const double profiled_ms = ms_since(t0) / o.profile_steps;
  fsdp::op_profile::enable(false);
  const std::vector<fsdp::op_profile::OpTime> rows = fsdp::op_profile::report();
  std::printf("\nper-op profile, %d step(s) of %s (%.1f ms/step profiled):\n", o.profile_steps, c.name.c_str(),
              profiled_ms);
  std::printf("%-20s %12s %12s %9s\n", "op", "calls/step", "ms/step", "% step");
  double ops_ms = 0;
  for (const auto& r : rows) {
    const double ms = r.total_ms / o.profile_steps;
    ops_ms += ms;
    std::printf("%-20s %12.1f %12.3f %8.1f%%\n", r.op.c_str(), double(r.calls) / o.profile_steps, ms,
                100.0 * ms / profiled_ms);
  }
  std::printf("%-20s %12s %12.3f %8.1f%%\n", "(all ops)", "", ops_ms, 100.0 * ops_ms / profiled_ms);
  std::printf("%-20s %12s %12.3f %8.1f%%\n", "(outside ops)", "", profiled_ms - ops_ms,
              100.0 * (profiled_ms - ops_ms) / profiled_ms);
  std::printf("   (outside ops: copies, collectives, the host's own time with the GPU idle; roofline for this "
              "shape:\n    VOCAB=%lld HIDDEN=%lld INTER=%lld LAYERS=%lld HEADS=%lld KV_HEADS=%lld SEQ=%d "
              "MICRO_BATCH=%d RANKS=1 bash bench/roofline/roofline.sh)\n",
              (long long)shape.vocab_size, (long long)shape.hidden_size, (long long)shape.intermediate_size,
              (long long)shape.num_layers, (long long)shape.num_heads, (long long)shape.num_kv_heads,
              cfg.train.seq_len, cfg.train.micro_batch_size);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const fsdp::UsageError& e) {
    if (!e.message.empty()) std::fprintf(stderr, "gpu_step_bench: %s\n", e.message.c_str());
    std::fputs(kUsage, e.message.empty() ? stdout : stderr);
    return e.message.empty() ? 0 : 2;
  }
  if (fsdp::cuda::device_count() == 0) {
    std::fprintf(stderr, "gpu_step_bench: no usable CUDA device (fsdp::cuda::device_count() is 0); nothing was run\n");
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);  // the trainer's start-up lines would split the tables
  std::printf("gpu_step_bench: %s (%.1f GiB)%s\n", fsdp::cuda::device_name(0).c_str(),
              double(fsdp::cuda::device_memory_bytes(0)) / double(1ull << 30),
              fsdp::cuda::is_emulated() ? "; the CPU emulator: every time below is meaningless, only the code path counts"
                                        : "");
  const std::string run_dir =
      (std::filesystem::temp_directory_path() / ("gpu_step_bench." + std::to_string(::getpid()))).string();
  int status = 0;
  for (const Case& c : o.cases) {
    try {
      run_case(c, o, run_dir);
    } catch (const std::exception& e) {
      fsdp::op_profile::enable(false);  // a case that failed in its profiled pass
      std::fprintf(stderr, "gpu_step_bench: case %s failed: %s\n", c.name.c_str(), e.what());
      status = 1;
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(run_dir, ec);
  return status;
}
