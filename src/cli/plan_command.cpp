// `fsdp_train plan --config FILE [--set ...] [--ranks N] [--device-memory SIZE]`: the memory
// plan (fsdp/plan/memory_plan.h) of a training run per rank, without allocating anything:
// the bytes of each category, the peak and whether it fits, the largest
// train.micro_batch_size that fits, and the fewest ranks per activation checkpointing mode.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fsdp/cli/commands.h"
#include "fsdp/cli/error_report.h"
#include "fsdp/config/config.h"
#include "fsdp/config/model_options.h"
#include "fsdp/core/cli_args.h"
#include "fsdp/plan/memory_plan.h"
#include "fsdp/plan/plan_target.h"
#include "fsdp/plan/trainable_layout.h"
#include "fsdp/train/exit_codes.h"
#include "fsdp/train/launch_checks.h"
#include "fsdp/train/setup.h"

namespace fsdp::cli {

using train::kExitError;
using train::kExitOk;
using train::kExitUsage;

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
         "  --ranks-per-node M     ranks per node: the HYBRID_SHARD(_ZERO2) default shard group, and on the\n"
         "                         CPU the ranks sharing the host's memory (default 8 on a GPU, N on the CPU)\n"
         "  --device cpu|cuda      plan for this backend (default: what train.device resolves to here;\n"
         "                         cuda when train.dtype is not float32)\n"
         "  --device-memory SIZE   memory of one GPU, or of the host on the CPU, with its unit: 80GB =\n"
         "                         8e10 bytes (kB, MB, GB, TB: powers of 10); 80GiB = 80G = 80 x 2^30\n"
         "                         (KiB/K, MiB/M, GiB/G, TiB/T: powers of 2); 8e9B in bytes. Default:\n"
         "                         this machine's GPU, or on the CPU the smallest of physical memory,\n"
         "                         the cgroup's limit, RLIMIT_AS and RLIMIT_DATA\n"
         "\n"
         "Exit status: 0 the run fits, 1 it does not, 2 usage or config error.\n";
}

namespace {

struct PlanArgs {
  std::string config;
  std::vector<std::string> overrides;
  plan::PlanRequest request;
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
    else if (a == "--ranks") p.request.ranks = positive_int(args.value(), "--ranks");
    else if (a == "--ranks-per-node") p.request.ranks_per_node = positive_int(args.value(), "--ranks-per-node");
    else if (a == "--device") p.request.device = args.value();
    else if (a == "--device-memory") p.request.memory = args.value();
    else throw unknown_argument(args.raw(), {"--help", "--config", "--set", "--ranks", "--ranks-per-node", "--device",
                                             "--device-memory"});
  }
  if (help) return p;
  if (p.config.empty()) throw UsageError{"--config FILE is required"};
  if (!p.request.device.empty() && p.request.device != "cpu" && p.request.device != "cuda")
    throw UsageError{"--device must be cpu or cuda, not '" + p.request.device + "'"};
  return p;
}

}  // namespace

int plan_command(int argc, char** argv) {
  apply_log_level_from_env();
  PlanArgs args;
  config::Config cfg;
  plan::PlanTarget target;
  try {
    bool help = false;
    args = parse(argc, argv, help);
    if (help) {
      std::fputs(plan_help(), stdout);
      return kExitOk;
    }
    cfg = config::load_config(args.config, args.overrides);
    target = plan::requested_plan_target(args.request, cfg);
    // The layout `train` would refuse at start-up on this many ranks, refused here too (the
    // tensor, shard and expert groups against the ranks and their nodes).
    dist::WorldInfo world;
    world.size = target.ranks;
    for (int r = 0; r < target.ranks; ++r) world.node_of_rank.push_back(r / std::max(target.ranks_per_node, 1));
    train::check_mesh(cfg, world);
    cfg = train::with_global_batch(cfg, target.ranks / std::max(cfg.parallel.tensor, 1));  // the data-parallel ranks
  } catch (const UsageError& e) {
    print_usage_error("plan", e.message);
    return kExitUsage;
  } catch (const config::ConfigError& e) {
    print_error("plan", e.what());
    return kExitUsage;
  }
  try {
    // A model folder not downloaded yet: its shape is the preset's (with the model.* keys),
    // which is what the plan needs; say so rather than fail.
    if (std::error_code ec; !cfg.model.init_from.empty() && !std::filesystem::exists(cfg.model.init_from, ec)) {
      std::printf("note: model.init_from %s is not there (not downloaded yet?): planning model.preset %s's shape with "
                  "the config's model.* keys instead\n",
                  cfg.model.init_from.c_str(), cfg.model.preset.c_str());
      cfg.model.init_from.clear();
    }
    const model::LlamaConfig model = config::training_model_config(cfg);
    config::warn_if_preset_unused(cfg, model);
    const plan::MemoryPlan memory_plan = plan::plan_memory(cfg, model, target);
    // Not model.summary(): its integer parameter count would overflow on absurd shapes.
    std::printf("model: vocab %lld hidden %lld intermediate %lld layers %lld heads %lld kv_heads %lld%s, seq_len %d\n%s%s",
                (long long)model.vocab_size, (long long)model.hidden_size, (long long)model.intermediate_size,
                (long long)model.num_layers, (long long)model.num_heads, (long long)model.num_kv_heads,
                model.is_moe() ? fmt::format(", {} experts top-{}", model.num_experts, model.experts_per_token).c_str() : "",
                cfg.train.seq_len, plan::format_plan(memory_plan).c_str(), plan::format_searches(cfg, model, memory_plan).c_str());
    // A layout the trainer does not build yet is planned all the same (its figures are
    // arithmetic), and said.
    if (const auto why = plan::unbuilt_layout(cfg))
      std::printf("note: %s: `fsdp_train train` refuses this layout for now; the figures above are its plan\n",
                  why->c_str());
    if (!memory_plan.fits()) std::printf("%s\n", plan::advise(cfg, model, memory_plan).c_str());
    return memory_plan.fits() ? kExitOk : kExitError;
  } catch (const config::ConfigError& e) {
    report_error("plan", e);
    return kExitUsage;
  } catch (const std::exception& e) {
    report_error("plan", e);
    return kExitError;
  }
}

}  // namespace fsdp::cli
