#include "fsdp/train/plan_main.h"

#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fsdp/config/config.h"
#include "fsdp/core/cli_args.h"
#include "fsdp/train/error_report.h"
#include "fsdp/train/exit_codes.h"
#include "fsdp/train/host_memory.h"
#include "fsdp/train/memory_plan.h"
#include "fsdp/train/setup.h"
#if defined(FSDP_WITH_CUDA)
#include "fsdp/core/cuda.h"
#endif

namespace fsdp::train {

const char* plan_help() {
  return "usage: fsdp_train plan --config FILE [--set section.key=value]... [options]\n"
         "\n"
         "Prints what one rank of the training run will hold, by category (sharded weights, gradients\n"
         "and AdamW state; gathered units in flight; saved activations under the checkpointing mode;\n"
         "logits; scratch; headroom), its peak and whether it fits, the largest train.micro_batch_size\n"
         "that fits, and the fewest ranks that fit under each activation checkpointing mode. Nothing\n"
         "is allocated; `fsdp_train train` runs the same plan at start-up.\n"
         "\n"
         "options:\n"
         "  --ranks N              the world size (default 1)\n"
         "  --ranks-per-node M     ranks per node: HYBRID_SHARD's default shard group, and on the CPU the\n"
         "                         ranks sharing the host's memory (default 8 on a GPU, N on the CPU)\n"
         "  --device cpu|cuda      plan for this backend (default: what train.device resolves to here;\n"
         "                         cuda when train.dtype is not float32)\n"
         "  --device-memory SIZE   memory of one GPU, or of the host on the CPU (80GB = 8e10 bytes,\n"
         "                         80GiB = 80 x 2^30; default: this machine's GPU, or on the CPU the smallest\n"
         "                         of physical memory, the cgroup's limit, RLIMIT_AS and RLIMIT_DATA)\n"
         "\n"
         "Exit status: 0 the run fits, 1 it does not, 2 usage or config error.\n";
}

namespace {

struct PlanArgs {
  std::string config;
  std::vector<std::string> overrides;
  int ranks = 1, ranks_per_node = 0;
  std::string device, memory;
};

int positive_int(const std::string& v, const char* flag) {
  try {
    size_t used = 0;
    const long n = std::stol(v, &used);
    if (used == v.size() && n >= 1 && n <= (1 << 24)) return int(n);
  } catch (const std::exception&) {
  }
  throw UsageError{fmt::format("{} needs a whole number from 1 to {}, not '{}'", flag, 1 << 24, v)};
}

PlanArgs parse(int argc, char** argv, bool& help) {
  PlanArgs p;
  ArgCursor args(argc, argv);
  while (args.next()) {
    const std::string& a = args.arg();
    if (a == "--help" || a == "-h") help = true;
    else if (a == "--config") p.config = args.value();
    else if (a == "--set") p.overrides.push_back(args.value());
    else if (a == "--ranks") p.ranks = positive_int(args.value(), "--ranks");
    else if (a == "--ranks-per-node") p.ranks_per_node = positive_int(args.value(), "--ranks-per-node");
    else if (a == "--device") p.device = args.value();
    else if (a == "--device-memory") p.memory = args.value();
    else throw UsageError{"unknown argument '" + args.raw() + "'"};
  }
  if (help) return p;
  if (p.config.empty()) throw UsageError{"--config FILE is required"};
  if (!p.device.empty() && p.device != "cpu" && p.device != "cuda")
    throw UsageError{"--device must be cpu or cuda, not '" + p.device + "'"};
  return p;
}

bool plans_for_gpu(const PlanArgs& a, const config::Config& cfg) {
  if (!a.device.empty()) return a.device == "cuda";
  if (cfg.train.device != "auto") return cfg.train.device == "cuda";
  if (cfg.train.dtype != DType::F32) return true;  // only the CUDA backend computes in 16 bits
#if defined(FSDP_WITH_CUDA)
  return cuda::real_gpu_visible();
#else
  return false;
#endif
}

PlanTarget target_of(const PlanArgs& a, const config::Config& cfg) {
  PlanTarget t;
  t.gpu = plans_for_gpu(a, cfg);
  t.ranks = a.ranks;
  t.ranks_per_node = a.ranks_per_node > 0 ? a.ranks_per_node : (t.gpu ? 8 : a.ranks);
  const int share = std::min(t.ranks, t.ranks_per_node);
  if (!a.memory.empty()) {
    double bytes = 0;
    try {
      bytes = parse_bytes(a.memory, "--device-memory");
    } catch (const Error& e) {
      throw UsageError{e.what()};
    }
    t.device_source = "--device-memory " + a.memory + (t.gpu || share == 1 ? "" : fmt::format(" shared by {} ranks", share));
    t.node_bytes = t.gpu ? 0 : bytes;
    t.device_bytes = t.gpu ? bytes : bytes / share;
    return t;
  }
  if (t.gpu) {
#if defined(FSDP_WITH_CUDA)
    if (cuda::real_gpu_visible()) {
      t.device_bytes = double(cuda::device_memory_bytes(0));
      t.device_source = "cuda:0 (" + cuda::device_name(0) + ")";
      return t;
    }
#endif
    throw UsageError{"planning for a GPU on a machine without one: give its memory, e.g. --device-memory 80GB"};
  }
  const HostMemory host = host_memory_limit(share);
  t.device_bytes = host.bytes;
  if (host.node_wide) t.node_bytes = host.bytes * share;
  t.device_source = host.node_wide && share > 1 ? fmt::format("{} shared by {} ranks", host.source, share) : host.source;
  return t;
}

std::string answers(const config::Config& cfg, const model::LlamaConfig& m, const MemoryPlan& plan) {
  const int ranks = plan.target.ranks;
  const auto b = largest_micro_batch(cfg, m, plan.target);
  std::string out = b ? fmt::format("largest train.micro_batch_size that fits on {} rank(s): {}\n", ranks, *b)
                      : fmt::format("no train.micro_batch_size fits on {} rank(s)\n", ranks);
  out += fmt::format("per activation checkpointing mode ({}, {} ranks per node):\n",
                     config::to_string(cfg.fsdp.sharding_strategy), plan.target.ranks_per_node);
  out += fmt::format("  {:<16} {:>30} {:>36}\n", "mode", "fewest ranks at micro-batch 1",
                     fmt::format("largest micro-batch on {} rank(s)", ranks));
  auto show = [](const std::optional<int>& v) { return v ? std::to_string(*v) : std::string("-"); };
  for (const char* mode : {"none", "selective", "full", "full + offload"}) {
    config::Config c = cfg;
    c.train.micro_batch_size = 1;
    c.train.activation_offload = std::string(mode) == "full + offload";
    c.train.activation_checkpointing = c.train.activation_offload ? "full" : mode;
    const auto n = fewest_ranks(c, m, plan.target, c.train.activation_checkpointing);
    out += fmt::format("  {:<16} {:>30} {:>36}\n", mode, show(n), show(largest_micro_batch(c, m, plan.target)));
  }
  return out;
}

}  // namespace

int plan_main(int argc, char** argv) {
  apply_log_level_from_env();
  PlanArgs args;
  config::Config cfg;
  PlanTarget target;
  try {
    bool help = false;
    args = parse(argc, argv, help);
    if (help) {
      std::fputs(plan_help(), stdout);
      return kExitOk;
    }
    cfg = config::load_config(args.config, args.overrides);
    target = target_of(args, cfg);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "error: fsdp_train plan: %s\n\n%s", e.message.c_str(), plan_help());
    return kExitUsage;
  } catch (const config::ConfigError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitUsage;
  }
  try {
    const model::LlamaConfig model = training_model_config(cfg);
    const MemoryPlan plan = plan_memory(cfg, model, target);
    // Not model.summary(): its integer parameter count would overflow on absurd shapes.
    std::printf("model: vocab %lld hidden %lld intermediate %lld layers %lld heads %lld kv_heads %lld%s, seq_len %d\n%s%s",
                (long long)model.vocab_size, (long long)model.hidden_size, (long long)model.intermediate_size,
                (long long)model.num_layers, (long long)model.num_heads, (long long)model.num_kv_heads,
                model.is_moe() ? fmt::format(", {} experts top-{}", model.num_experts, model.experts_per_token).c_str() : "",
                cfg.train.seq_len, format_plan(plan).c_str(), answers(cfg, model, plan).c_str());
    if (!plan.fits()) std::printf("%s\n", advise(cfg, model, plan).c_str());
    return plan.fits() ? kExitOk : kExitError;
  } catch (const config::ConfigError& e) {
    report_error(e);
    return kExitUsage;
  } catch (const std::exception& e) {
    report_error(e);
    return kExitError;
  }
}

}  // namespace fsdp::train
