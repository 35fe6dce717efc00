// Activation checkpointing's price and what it buys: the step time and the measured peak
// memory of none / selective / full / full + offload on one model, as ratios against none,
// next to the targets (full <= 1.35x step time, about one more forward; selective <= 1.10x).
//
//   build/bench/ac_bench                         # the ~50M CPU model (step_bench's llama-50M)
//   build/bench/ac_bench --device cuda           # a 1.1B model on one GPU in bf16 (gpu_check.sh)
//   build/bench/ac_bench --device cuda --smoke   # a tiny model: the code path on the emulator (CI)
//   build/bench/ac_bench --steps 8 --set train.micro_batch_size=8
//
// Step time: the fastest of the timed steps after two warm-up steps, as wall time and as
// the process's CPU time (user + system, all threads): on a shared machine the wall time
// measures the neighbours too, the CPU time mostly the work (run with OMP_NUM_THREADS=1 so
// that no thread spins at a barrier). Memory: the device allocator's peak over a
// step, and the plan's saved-activation bytes (equal to what the model allocates). On the
// CPU backend offloading copies into a host arena of its own: the device peak drops, the
// host's does not, and nothing overlaps, so its time there says what the copies cost.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "fsdp/core/cli_args.h"
#include "fsdp/core/copy_stream.h"
#include "fsdp/train/trainer.h"

namespace {

struct Options {
  std::string device = "cpu";
  bool smoke = false;
  int steps = 5;
  std::vector<std::string> sets;
};

Options parse(int argc, char** argv) {
  Options o;
  fsdp::ArgCursor args(argc, argv);
  while (args.next()) {
    if (args.arg() == "--device") o.device = args.value();
    else if (args.arg() == "--smoke") o.smoke = true;
    else if (args.arg() == "--steps") o.steps = std::stoi(args.value());
    else if (args.arg() == "--set") o.sets.push_back(args.value());
    else throw fsdp::UsageError{"unknown argument '" + args.raw() + "'"};
  }
  if (o.device != "cpu" && o.device != "cuda") throw fsdp::UsageError{"--device is cpu or cuda"};
  if (o.smoke) o.steps = 1;
  return o;
}

std::vector<std::string> model(const Options& o) {
  if (o.smoke)
    return {"model.preset=tiny", "model.num_layers=4", "train.seq_len=32", "train.micro_batch_size=2",
            "train.dtype=bfloat16", "fsdp.param_dtype=bfloat16", "fsdp.reduce_dtype=bfloat16"};
  if (o.device == "cuda")  // ~1.1B parameters, bf16, 4 x 2048 tokens
    return {"model.preset=tiny", "model.vocab_size=32000", "model.hidden_size=2048", "model.intermediate_size=5632",
            "model.num_layers=22", "model.num_heads=32", "model.num_kv_heads=4", "model.max_seq_len=2048",
            "train.seq_len=2048", "train.micro_batch_size=4", "train.dtype=bfloat16", "fsdp.param_dtype=bfloat16",
            "fsdp.reduce_dtype=bfloat16"};
  return {"model.preset=tiny", "model.vocab_size=32000", "model.hidden_size=512", "model.intermediate_size=1408",
          "model.num_layers=8", "model.num_heads=8", "model.num_kv_heads=8", "train.seq_len=512",
          "train.micro_batch_size=4"};
}

struct Row {
  std::string mode;
  double ms = 0, cpu_ms = 0, peak = 0, saved = 0, host = 0;
};

double cpu_ms_now() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) * 1e3 + double(t.tv_nsec) / 1e6;
}

Row measure(const Options& o, const std::string& mode, const std::vector<std::string>& settings) {
  std::vector<std::string> s = model(o);
  s.insert(s.end(), settings.begin(), settings.end());
  for (const char* x : {"logging.metrics=false", "checkpoint.resume=none", "train.max_steps=1000", "data.num_workers=1"})
    s.push_back(x);
  s.push_back("train.device=" + o.device);
  s.insert(s.end(), o.sets.begin(), o.sets.end());
  auto groups = fsdp::dist::local_process_groups();
  fsdp::train::Trainer t(fsdp::config::load_config_string("data:\n  source: synthetic\n", "ac_bench", s), groups);
  Row r;
  r.mode = mode;
  for (const auto& row : t.memory_plan().rows)
    if (row.name == "saved activations") r.saved = row.bytes;
  for (int i = 0; i < (o.smoke ? 1 : 2); ++i) t.train_step();
  r.ms = r.cpu_ms = 1e300;
  for (int i = 0; i < o.steps; ++i) {
    const double cpu0 = cpu_ms_now();
    const fsdp::obs::StepMetrics m = t.train_step();
    r.cpu_ms = std::min(r.cpu_ms, cpu_ms_now() - cpu0);
    r.ms = std::min(r.ms, m.step_ms);
    r.peak = std::max(r.peak, double(m.peak_tensor_bytes));
  }
  r.host = double(fsdp::CopyStream::host_stats().current_bytes);
  return r;
}

double mib(double b) { return b / double(1 << 20); }

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);  // not each trainer's start-up lines and memory plan
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const fsdp::UsageError& e) {
    std::fprintf(stderr, "ac_bench: %s\nusage: ac_bench [--device cpu|cuda] [--smoke] [--steps N] [--set k=v]...\n",
                 e.message.c_str());
    return 2;
  }
  const std::vector<std::pair<std::string, std::vector<std::string>>> modes = {
      {"none", {"train.activation_checkpointing=none"}},
      {"selective", {"train.activation_checkpointing=selective"}},
      {"full", {"train.activation_checkpointing=full"}},
      {"full + offload", {"train.activation_checkpointing=full", "train.activation_offload=true"}},
  };
  std::vector<Row> rows;
  for (const auto& [mode, settings] : modes) {
    const double host_before = double(fsdp::CopyStream::host_stats().current_bytes);
    Row r = measure(o, mode, settings);
    r.host -= host_before;
    rows.push_back(r);
  }
  std::printf("activation checkpointing on %s (%s), fastest of %d step(s):\n", o.device.c_str(),
              o.smoke ? "smoke: tiny model" : o.device == "cuda" ? "1.1B, bf16, 4 x 2048 tokens" : "~58M, 4 x 512 tokens",
              o.steps);
  std::printf("%-15s %9s %8s %11s %8s %8s %10s %8s %10s %11s\n", "mode", "ms/step", "vs none", "cpu ms/step",
              "vs none", "target", "peak MiB", "vs none", "saved MiB", "host MiB");
  const Row& none = rows.front();
  for (const Row& r : rows) {
    const char* target = r.mode == "selective" ? "<= 1.10" : r.mode == "full" ? "<= 1.35" : "";
    std::printf("%-15s %9.1f %7.3fx %11.1f %7.3fx %8s %10.1f %7.3fx %10.1f %11.1f\n", r.mode.c_str(), r.ms,
                r.ms / none.ms, r.cpu_ms, r.cpu_ms / none.cpu_ms, target, mib(r.peak), r.peak / none.peak,
                mib(r.saved), mib(r.host));
  }
  return 0;
}
