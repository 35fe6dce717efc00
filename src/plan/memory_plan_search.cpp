// Questions asked of the memory plan by trying configs: the largest micro-batch that fits,
// the fewest ranks per checkpointing mode, and which one change helps a run that does not
// fit. Each try is arithmetic (memory_plan.cpp), so a search costs microseconds.
#include <algorithm>
#include <functional>

#include <fmt/format.h>

#include "fsdp/model/peft.h"
#include "fsdp/model/tensor_parallel.h"
#include "fsdp/plan/memory_plan.h"
#include "fsdp/plan/trainable_layout.h"

namespace fsdp::plan {
namespace {

// The largest n in [1, limit] with fits(n), for fits true up to some n and false after.
std::optional<int> largest(const std::function<bool(int)>& fits, int limit) {
  if (!fits(1)) return std::nullopt;
  int lo = 1, hi = 2;
  while (hi <= limit && fits(hi)) lo = hi, hi = hi > limit / 2 ? limit + 1 : hi * 2;
  if (hi > limit) hi = limit + 1;
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

// One change to a config, in the words of the keys it sets.
struct Change {
  std::string what;
  std::function<void(config::Config&)> edit;
  bool expert = false;  // sets parallel.expert
};

// Whether cfg can run on `ranks` ranks as the mesh lays them out: whole tensor groups,
// HYBRID_SHARD's shard groups of whole data-parallel ranks, an expert degree that divides
// the shard group (dist::mesh_problem's rules, which `train` and `plan` refuse by).
bool holds(const config::Config& cfg, const PlanTarget& target, int ranks) {
  const int tensor = std::max(cfg.parallel.tensor, 1), expert = std::max(cfg.parallel.expert, 1);
  if (ranks % tensor != 0) return false;
  const int data = ranks / tensor;
  if (is_hybrid(cfg.fsdp.sharding_strategy) && cfg.fsdp.shard_group_size > 0 &&
      data % cfg.fsdp.shard_group_size != 0)
    return false;
  return data % expert == 0 && shard_group(cfg, target.with_ranks(ranks)) % expert == 0;
}

// The single changes that lower a rank's memory, for the config as it is, on `target`
// (under HYBRID_SHARD_ZERO2, HYBRID_SHARD first; then the batch, checkpointing, strategy
// and prefetch keys); then a tensor-parallel degree (2, 4, 8) that the model's shape and the target's nodes
// hold, which splits the activations and the gathered units over a node's ranks; last, for
// a mixture of experts, each expert degree E above the config's that divides the experts
// and the shard group, smallest first. None makes a layout the trainer refuses
// (trainable_layout.h) of one it builds.
std::vector<Change> changes(const config::Config& cfg, const model::LlamaConfig& m, const PlanTarget& target) {
  std::vector<Change> out;
  const config::TrainConfig& t = cfg.train;
  // HYBRID_SHARD_ZERO2 keeps every unit gathered from its forward to its backward; HYBRID_SHARD,
  // over the same groups, frees it after forward for one more all-gather per unit: cheaper
  // than recomputing activations or a smaller batch, so it comes first.
  if (cfg.fsdp.sharding_strategy == config::ShardingStrategy::HYBRID_SHARD_ZERO2)
    out.push_back({"fsdp.sharding_strategy: HYBRID_SHARD (resharded after forward, over the same groups)",
                   [](config::Config& c) { c.fsdp.sharding_strategy = config::ShardingStrategy::HYBRID_SHARD; }});
  if (t.micro_batch_size > 1) out.push_back({"train.micro_batch_size: 1", [](config::Config& c) { c.train.micro_batch_size = 1; }});
  if (t.activation_checkpointing == "none")
    out.push_back({"train.activation_checkpointing: selective",
                   [](config::Config& c) { c.train.activation_checkpointing = "selective"; }});
  if (t.activation_checkpointing != "full")
    out.push_back({"train.activation_checkpointing: full", [](config::Config& c) { c.train.activation_checkpointing = "full"; }});
  if (t.activation_checkpointing_every > 1)
    out.push_back({"train.activation_checkpointing_every: 1",
                   [](config::Config& c) { c.train.activation_checkpointing_every = 1; }});
  if (!t.activation_offload)
    out.push_back({"train.activation_checkpointing: full with train.activation_offload: true", [](config::Config& c) {
                     if (c.train.activation_checkpointing == "none") c.train.activation_checkpointing = "full";
                     c.train.activation_offload = true;
                   }});
  if (t.grad_accum_steps > 1)
    out.push_back({"train.grad_accum_steps: 1 (no_sync keeps every unit's unsharded gradient)",
                   [](config::Config& c) { c.train.grad_accum_steps = 1; }});
  if (cfg.fsdp.sharding_strategy != config::ShardingStrategy::FULL_SHARD)
    out.push_back({"fsdp.sharding_strategy: FULL_SHARD",
                   [](config::Config& c) { c.fsdp.sharding_strategy = config::ShardingStrategy::FULL_SHARD; }});
  if (cfg.fsdp.prefetch_limit > 0) out.push_back({"fsdp.prefetch_limit: 0", [](config::Config& c) { c.fsdp.prefetch_limit = 0; }});
  // Tensor parallelism runs every model on the CPU and on GPUs; QLoRA only where each
  // rank's NF4 slices are whole blocks of the weight (model::nf4_split_refusal).
  for (int T : {2, 4, 8}) {
    if (T <= cfg.parallel.tensor || target.ranks % T != 0 || std::max(target.ranks_per_node, 1) % T != 0) continue;
    if (model::tensor_parallel_problem(m, T, cfg.train.seq_len)) continue;
    model::LlamaConfig at_t = m;
    at_t.tensor_parallel = T;
    if (cfg.model.quantization == "nf4" && !model::nf4_split_refusal(at_t).empty()) continue;
    out.push_back({fmt::format("parallel.tensor: {} (tensor parallelism over {} ranks of a node)", T, T),
                   [T](config::Config& c) { c.parallel.tensor = T; }});
  }
  // Expert parallelism: a rank gathers a block without its experts and its own n/E experts
  // instead of the whole layer, and its expert side holds E x min(k, n/E) / k times one
  // process's activations (sized for the worst routing: model::max_received_rows).
  const int n = int(m.num_experts);
  for (int E = std::max(cfg.parallel.expert, 1) + 1; m.is_moe() && E <= n; ++E) {
    config::Config at_e = cfg;
    at_e.parallel.expert = E;
    if (n % E != 0 || !holds(at_e, target, target.ranks)) continue;
    out.push_back({fmt::format("parallel.expert: {} ({} of the {} experts of every layer per rank, tokens moved by "
                               "all-to-all)",
                               E, n / E, n),
                   [E](config::Config& c) { c.parallel.expert = E; }, true});
  }
  const bool built = !unbuilt_layout(cfg);
  std::erase_if(out, [&](const Change& c) {
    config::Config changed = cfg;
    c.edit(changed);
    return built && unbuilt_layout(changed);
  });
  return out;
}

// The keys that make the model the size it is, for a message about a model that fits nowhere.
std::string model_keys(const config::Config& cfg, const model::LlamaConfig& m) {
  const std::string from = cfg.model.init_from.empty() ? "model.preset " + cfg.model.preset
                                                        : cfg.model.init_from + "/config.json";
  return fmt::format("{} with model.hidden_size {}, model.intermediate_size {}, model.num_layers {}, "
                     "model.vocab_size {}{}",
                     from, m.hidden_size, m.intermediate_size, m.num_layers, m.vocab_size,
                     m.is_moe() ? fmt::format(", model.num_experts {}", m.num_experts) : std::string());
}

}  // namespace

std::optional<int> largest_micro_batch(const config::Config& cfg, const model::LlamaConfig& m,
                                       const PlanTarget& target) {
  config::Config c = cfg;
  return largest(
      [&](int b) {
        c.train.micro_batch_size = b;
        return plan_memory(c, m, target).fits();
      },
      1 << 24);
}

std::optional<int> fewest_ranks(const config::Config& cfg, const model::LlamaConfig& m, const PlanTarget& target,
                                const std::string& mode, int limit) {
  config::Config c = cfg;
  c.train.activation_checkpointing = mode;
  if (mode == "none") c.train.activation_offload = false;
  const int per_node = std::max(target.ranks_per_node, 1);
  auto fits = [&](int n) { return holds(c, target, n) && plan_memory(c, m, target.with_ranks(n)).fits(); };
  // Within one node every count; past it whole nodes, found by doubling and then halving
  // (more ranks never need more memory per rank: every term shrinks or stays).
  for (int n = 1; n <= std::min(per_node, limit); ++n)
    if (fits(n)) return n;
  int64_t lo = 1, hi = 2;  // in nodes: lo does not fit
  while (hi * per_node <= limit && !fits(int(hi * per_node))) lo = hi, hi *= 2;
  if (hi * per_node > limit) return std::nullopt;
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    (fits(int(mid * per_node)) ? hi : lo) = mid;
  }
  return int(hi * per_node);
}

std::string advise(const config::Config& cfg, const model::LlamaConfig& m, const MemoryPlan& plan) {
  const std::string head = fmt::format("rank memory: the plan needs {} per rank but {} allows {} (over by {})",
                                       human_bytes(plan.peak), plan.target.device_source,
                                       human_bytes(plan.target.device_bytes), human_bytes(plan.peak - plan.target.device_bytes));
  if (cfg.train.micro_batch_size > 1) {
    if (const auto b = largest_micro_batch(cfg, m, plan.target))
      return head + fmt::format("; train.micro_batch_size {} fits (the largest)", *b);
  }
  std::vector<Change> options = changes(cfg, m, plan.target);
  const Change* best = nullptr;
  double best_peak = plan.peak;
  for (const Change& c : options) {
    config::Config changed = cfg;
    c.edit(changed);
    const MemoryPlan p = plan_memory(changed, m, plan.target);
    if (p.fits()) return head + fmt::format("; {} makes it fit ({} per rank)", c.what, human_bytes(p.peak));
    if (p.peak < best_peak) best = &c, best_peak = p.peak;
  }
  // The smallest expert degree that fits beside one other change (options lists E upwards).
  for (const Change& x : options) {
    if (!x.expert) continue;
    for (const Change& c : options) {
      if (c.expert) continue;
      config::Config changed = cfg;
      x.edit(changed);
      c.edit(changed);
      if (unbuilt_layout(changed) && !unbuilt_layout(cfg)) continue;
      const MemoryPlan p = plan_memory(changed, m, plan.target);
      if (p.fits())
        return head + fmt::format("; {} with {} makes it fit ({} per rank)", x.what, c.what, human_bytes(p.peak));
    }
  }
  if (const auto n = fewest_ranks(cfg, m, plan.target, cfg.train.activation_checkpointing); n && *n > plan.target.ranks)
    return head + fmt::format("; {} ranks make it fit", *n);
  std::string tail = "; no single change makes it fit";
  if (best != nullptr)
    tail += fmt::format("; the one that saves the most is {} (to {} per rank)", best->what, human_bytes(best_peak));
  // All of them at once (but a layout the trainer refuses), over as many ranks as it takes.
  config::Config all = cfg;
  for (const Change& c : options) {
    config::Config next = all;
    c.edit(next);
    if (!unbuilt_layout(next) || unbuilt_layout(cfg)) all = next;
  }
  if (const auto n = fewest_ranks(all, m, plan.target, all.train.activation_checkpointing)) {
    tail += fmt::format("; all of them together fit on {} rank(s)", *n);
  } else {
    const double sharded = plan.rows[0].bytes + plan.rows[1].bytes + plan.rows[2].bytes;
    tail += fmt::format("; not even all of them together fit on up to 2^20 ranks: the model is too large ({} "
                        "parameters, {} of fp32 weights, gradients and AdamW moments on {} rank(s): {})",
                        human_count(plan.parameters), human_bytes(sharded), plan.target.ranks, model_keys(cfg, m));
  }
  return head + tail;
}

std::string format_searches(const config::Config& cfg, const model::LlamaConfig& m, const MemoryPlan& plan) {
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

}  // namespace fsdp::plan
