// The memory plan's table; see memory_plan.h. The searches and the advice are in
// memory_plan_search.cpp.
#include "fsdp/plan/memory_plan.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "fsdp/config/model_options.h"
#include "fsdp/fsdp/engine_memory.h"
#include "fsdp/model/activation_memory.h"
#include "fsdp/model/expert_parallel.h"
#include "fsdp/model/lora_adapter.h"
#include "fsdp/model/peft.h"
#include "fsdp/plan/host_memory.h"

namespace fsdp::plan {
namespace {

// Estimates of what lies outside the tensors (memory_plan.h, "allocator headroom").
constexpr double kGpuContextBytes = 2.0 * (1ull << 30);  // CUDA context, NCCL channels and proxies
constexpr double kGpuFragmentation = 0.05;               // the stream-ordered pool's slack over its tensors
constexpr double kCpuProcessBytes = 384.0 * (1 << 20);   // code, MPI, OpenMP and loader threads' stacks and heaps
constexpr double kCublasLtWorkspace = 32.0 * (1 << 20);  // ops/cuda/matmul.cpp's kWorkspaceBytes

std::string human(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (!std::isfinite(bytes)) return "inf";
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024 && u < 6) v /= 1024, ++u;
  if (std::fabs(v) >= 1024) return fmt::format("{:.3g} B", bytes);
  return u == 0 ? fmt::format("{:.0f} B", v) : fmt::format("{:.2f} {}", v, kUnits[u]);
}

// The model's units as the engine shards them: the embedding, L blocks, the head; under
// tensor parallelism (c.tensor_parallel T) one tensor rank's: its slices of q/k/v/o, the
// MLP or each expert, the embedding and the head (model/param_units.h, Note [Tensor
// parallel layout]), the norms and the router whole. Under expert parallelism
// (c.expert_units()) each block keeps its router and the rank's n/E experts of it are a unit
// of their own, sharded over the `expert_shard` ranks that hold the same experts.
std::vector<UnitShape> plain_shapes(const model::LlamaConfig& c, int expert_shard = 1) {
  const double C = double(c.hidden_size), F = double(c.intermediate_size), V = double(c.vocab_size);
  const double T = double(c.tensor_parallel), L = double(c.num_layers);
  const double attention = (C * double(c.qkv_dim()) + double(c.q_dim()) * C) / T;
  const double experts = double(c.expert_units() ? c.local_experts() : c.num_experts) * 3 * C * F / T;
  const double mlp = c.is_moe() ? C * double(c.num_experts) + (c.expert_units() ? 0 : experts) : 3 * C * F / T;
  const double head = c.tie_word_embeddings ? C : V * C / T + C;  // a tied head holds only the norm
  std::vector<UnitShape> shapes = {{V * C / T, 1}, {attention + mlp + 2 * C, L}, {head, 1}};
  if (c.expert_units()) shapes.push_back({experts, L, 0, true, expert_shard});
  return shapes;
}

// LoRA's layout (model/peft.h) of a one-block model: every block's is the same, so the
// embedding, one block (times L) and the head give the shapes without laying out L blocks.
std::vector<model::UnitLayout> lora_layout(const config::Config& cfg, const model::LlamaConfig& c) {
  model::LlamaConfig one = c;
  one.num_layers = 1;
  // Under LoRA the engine's rows are FSDP alone's at any parallel.expert, an upper bound: the
  // same sharded state per rank, but a whole block's gathered buffers where expert
  // parallelism gathers a block without its experts, or this rank's experts.
  one.expert_parallel = 1;
  return config::checked_lora_units(one, config::peft_keys(cfg));
}

// Under LoRA: trainable adapters and frozen bytes per unit; otherwise plain_shapes.
std::vector<UnitShape> unit_shapes(const config::Config& cfg, const model::LlamaConfig& c, int expert_shard) {
  if (!cfg.lora.enabled) return plain_shapes(c, expert_shard);
  const std::vector<model::UnitLayout> units = lora_layout(cfg, c);
  std::vector<UnitShape> shapes;
  for (size_t u = 0; u < units.size(); ++u)
    shapes.push_back({double(units[u].numel), u == 1 ? double(c.num_layers) : 1.0, double(units[u].frozen_bytes)});
  return shapes;
}

double parameter_count(const std::vector<UnitShape>& shapes) {
  double n = 0;
  for (const UnitShape& s : shapes) n += s.numel * s.count;
  return n;
}

std::string mode_name(const config::TrainConfig& t) {
  std::string s = t.activation_checkpointing;
  if (s != "none" && t.activation_checkpointing_every > 1) s += fmt::format(" every {}", t.activation_checkpointing_every);
  if (t.activation_offload) s += fmt::format(" + offload (horizon {})", t.activation_offload_horizon);
  return s;
}

void add_engine_rows(MemoryPlan& p, const config::Config& cfg, const model::LlamaConfig& m, int group) {
  const FsdpOptions o = config::fsdp_options(cfg, p.target.gpu ? Device::cuda(0) : Device::cpu());
  // Expert parallelism: the expert group is borrowed from the shard group (dist/mesh.h).
  const int expert_shard = m.expert_units() ? std::max(group / int(m.expert_parallel), 1) : 1;
  const std::vector<UnitShape> shapes = unit_shapes(cfg, m, expert_shard);
  const EngineMemory e = engine_memory(shapes, group, o, cfg.train.grad_accum_steps);
  std::string shards =
      cfg.lora.enabled ? fmt::format("{} adapter parameters (LoRA) over a shard group of {}",
                                     human_count(parameter_count(shapes)), group)
                       : fmt::format("{} parameters over a shard group of {}", human_count(p.parameters), group);
  if (m.expert_units())
    shards += fmt::format("; each rank's {} of {} experts per layer (parallel.expert {}) over the {} rank(s) holding them",
                          m.local_experts(), m.num_experts, m.expert_parallel, expert_shard);
  p.rows.push_back({"fp32 master weights (shards)", e.master, shards});
  p.rows.push_back({"AdamW moments (shards)", e.moments, "exp_avg and exp_avg_sq, fp32"});
  p.rows.push_back({"fp32 gradients (shards)", e.grads, "reduce-scatter results, summed over micro-batches"});
  if (e.frozen > 0)
    p.rows.push_back({"frozen base (shards)", e.frozen,
                      fmt::format("{} base, never reduced or updated", cfg.model.quantization == "nf4" ? "NF4" : "dense")});
  if (e.shard_casts > 0)
    p.rows.push_back({"param/reduce dtype shard copies", e.shard_casts,
                      fmt::format("fsdp.param_dtype {}, reduce_dtype {}", dtype_name(o.param_dtype),
                                  dtype_name(o.reduce_dtype))});
  const double in_flight = e.compute_buffers - e.kept_gradients;
  if (in_flight > 0)
    p.rows.push_back({"gathered units in flight", in_flight * e.buffer_bytes,
                      fmt::format("{:.0f} x {} (parameters and gradients of the largest unit; {}, prefetch_limit {})",
                                  in_flight, human(e.buffer_bytes), config::to_string(o.strategy), o.prefetch_limit)});
  if (e.kept_gradients > 0)
    p.rows.push_back({"no_sync's unsharded gradients", e.kept_gradients * e.buffer_bytes,
                      fmt::format("{:.0f} x {}: every unit's between micro-batches (grad_accum_steps {})",
                                  e.kept_gradients, human(e.buffer_bytes), cfg.train.grad_accum_steps)});
  if (e.frozen_buffers > 0)
    p.rows.push_back({"gathered frozen units in flight", e.frozen_buffers * e.frozen_buffer_bytes,
                      fmt::format("{:.0f} x {} (the largest frozen unit's bytes)", e.frozen_buffers,
                                  human(e.frozen_buffer_bytes))});
  if (e.staging > 0)
    p.rows.push_back({"collective staging", e.staging, "all-gather in param_dtype, reduce-scatter out in reduce_dtype"});
  p.rows.push_back({"optimizer scratch", e.scalars, "AdamW steps in place; the gradient norm's float64"});
}

void add_activation_rows(MemoryPlan& p, const config::Config& cfg, const model::LlamaConfig& m) {
  const auto& t = cfg.train;
  const int64_t B = t.micro_batch_size, T = t.seq_len, N = B * T;
  const model::ActivationMemory a = model::activation_memory(m, B, T, t.dtype, config::activation_checkpointing(t));
  std::string saved = fmt::format("{} x {} tokens, activation_checkpointing {}", B, T, p.checkpointing);
  // Note [Expert-parallel dispatch]: the trainer binds the expert side for the worst routing,
  // with or without a capacity (the drop comes after), and so does the plan.
  if (m.expert_units())
    saved += fmt::format("; the expert side for the worst routing ({} rows{})", model::max_received_rows(m, N),
                         m.capacity_factor > 0 ? ", moe.capacity_factor does not shrink it" : "");
  p.rows.push_back({"saved activations", a.saved, saved});
  p.rows.push_back({"logits and cross-entropy", a.head, fmt::format("[{}, {}] in {}{}", N, m.local_vocab(), dtype_name(t.dtype), m.tensor_parallel > 1 ? " (this rank's vocabulary)" : "")});
  p.rows.push_back({"backward scratch", a.scratch, "one block's gradients, shared by every block"});
  // LoRA keeps nothing of its own for backward (lora_adapter.h recomputes u and d(x) from
  // the Linear's input, which the block's bind() lists keep): one scratch serves them all.
  if (cfg.lora.enabled) {
    // An expert's Linear sees up to every token of its expert group (decoder.cpp's scratch_for).
    const double rows = double(N) * double(m.expert_units() ? m.expert_parallel : 1);
    const double lora = model::linear_scratch_bytes(lora_layout(cfg, m), rows, t.dtype);
    if (lora > 0) p.rows.push_back({"LoRA and NF4 scratch", lora, "an adapter's input and rank-r temporaries, one "
                                    "dequantized NF4 unit; shared by every Linear"});
  }
  if (a.host > 0) {
    const PlanRow row{"offloaded activations", a.host, "what checkpointed blocks keep, between forward and backward"};
    if (p.target.gpu) p.host.push_back(row);
    else p.rows.push_back({row.name + " (host arena)", a.host, row.detail + "; its own allocator", false});
  }
  // The trainer's own buffers: RoPE tables (float32 cos and sin), the batch, per-step sums.
  const DType st = stat_dtype(t.dtype);
  double other = a.batch + 2.0 * double(m.max_seq_len) * double(m.head_dim() / 2) * 4;
  if (p.target.gpu) {
    other += double(t.grad_accum_steps) * double(N) * double(dtype_size(st));  // the step's losses
  } else {
    other += kStepVoteSlots * 8.0;  // the step's votes (train/step_votes.h asserts the count)
    // The step's micro-batches staged before its first forward (ids, targets and document
    // starts, int32): the trained-token count the loss divides by is known before any
    // backward (trainer.h).
    other += double(t.grad_accum_steps) * double(N) * 12;
    if (m.is_moe()) other += double(m.num_layers) * double(m.num_experts) * 8;  // expert load sums
  }
  if (m.is_moe()) other += double(m.num_layers) * double(m.num_experts + 1) * double(dtype_size(st));  // router stats
  p.rows.push_back({"batch, RoPE tables, step buffers", other, "ids, targets and document starts, cos/sin tables, loss and router sums"});
}

void add_outside_rows(MemoryPlan& p, const config::Config& cfg, const model::LlamaConfig& m) {
  const auto& t = cfg.train;
  const double shards = p.rows[0].bytes;  // the fp32 master shards; a snapshot holds 3 of them
  if (cfg.checkpoint.async) {
    const PlanRow snapshot{"checkpoint snapshot (checkpoint.async)", 3 * shards, "master and moments, for the writer thread"};
    if (p.target.gpu) p.host.push_back(snapshot);
    else p.rows.push_back(snapshot);
  }
  double tensors = 0;
  for (const PlanRow& r : p.rows) tensors += r.bytes;
  if (p.target.gpu) {
    const double N = double(t.micro_batch_size) * double(t.seq_len);
    const double scratch = kCublasLtWorkspace + N * double(m.num_heads) * 8 + std::ceil(N / 64) * double(m.hidden_size) * 8;
    p.rows.push_back({"op scratch and workspaces", scratch, "cuBLASLt workspace, attention and RMSNorm temporaries",
                      false});
    p.rows.push_back({"allocator headroom (estimate)", kGpuContextBytes + kGpuFragmentation * tensors,
                      "CUDA context and NCCL buffers, 5% pool fragmentation", false});
  } else if (p.target.address_space) {
    const AddressSpace a = address_space_outside_tensors(compute_threads(), cfg.data.num_workers);
    p.rows.push_back({"address space outside tensors (RLIMIT_AS)", a.bytes, a.detail, false});
  } else {
    p.rows.push_back({"process outside tensors (estimate)", kCpuProcessBytes,
                      "code, MPI, thread stacks and heaps, loader buffers", false});
  }
}

}  // namespace

// Over the data-parallel ranks: the world / parallel.tensor (dist/mesh.h).
int shard_group(const config::Config& cfg, const PlanTarget& t) {
  const int T = std::max(cfg.parallel.tensor, 1);
  const int data = std::max(t.ranks / T, 1), data_per_node = std::max(t.ranks_per_node / T, 1);
  switch (cfg.fsdp.sharding_strategy) {
    case config::ShardingStrategy::FULL_SHARD:
    case config::ShardingStrategy::SHARD_GRAD_OP: return data;
    case config::ShardingStrategy::NO_SHARD: return 1;
    case config::ShardingStrategy::HYBRID_SHARD:
    case config::ShardingStrategy::HYBRID_SHARD_ZERO2:
      return cfg.fsdp.shard_group_size > 0 ? cfg.fsdp.shard_group_size : std::min(data, data_per_node);
  }
  return data;
}

PlanTarget PlanTarget::with_ranks(int n) const {
  PlanTarget t = *this;
  t.ranks = n;
  if (node_bytes > 0) t.device_bytes = node_bytes / std::min(n, std::max(ranks_per_node, 1));
  return t;
}

std::string human_bytes(double bytes) { return human(bytes); }

std::string human_count(double n) {
  if (n >= 1e15) return fmt::format("{:.3g}", n);
  if (n >= 1e12) return fmt::format("{:.3g}T", n / 1e12);
  if (n >= 1e9) return fmt::format("{:.3g}B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.3g}M", n / 1e6);
  return fmt::format("{:.0f}", n);
}

MemoryPlan plan_memory(const config::Config& cfg, const model::LlamaConfig& whole, const PlanTarget& target) {
  MemoryPlan p;
  p.target = target;
  p.micro_batch_size = cfg.train.micro_batch_size;
  p.checkpointing = mode_name(cfg.train);
  p.parameters = parameter_count(plain_shapes(whole));
  // What one rank holds and computes: its tensor rank's share under parallel.tensor, LoRA's
  // adapters and frozen base included (lora_layout: each split as its base).
  model::LlamaConfig m = whole;
  m.tensor_parallel = std::max(cfg.parallel.tensor, 1);
  // Expert parallelism: the engine's rows are the expert-parallel layout's (a block without
  // its experts over the shard group, the rank's experts over the ranks holding them:
  // engine_memory), the activations too (the expert side sized for the worst routing
  // whatever moe.capacity_factor, as the trainer allocates it, and the dispatch's buffers:
  // activation_memory binds what the trainer allocates).
  if (m.is_moe() && cfg.parallel.expert > 1 && m.num_experts % cfg.parallel.expert == 0)
    m.expert_parallel = cfg.parallel.expert;
  add_engine_rows(p, cfg, m, shard_group(cfg, target));
  add_activation_rows(p, cfg, m);
  add_outside_rows(p, cfg, m);
  for (const PlanRow& r : p.rows) {
    p.peak += r.bytes;
    if (r.counted) p.tensor_peak += r.bytes;
  }
  return p;
}

std::string format_plan(const MemoryPlan& p) {
  std::string out = fmt::format("memory plan per rank: {} rank(s), {}, micro_batch_size {}, {} parameters\n",
                                p.target.ranks, p.target.gpu ? "GPU" : "CPU", p.micro_batch_size,
                                human_count(p.parameters));
  for (const PlanRow& r : p.rows) out += fmt::format("  {:<40} {:>12}  {}\n", r.name, human(r.bytes), r.detail);
  out += fmt::format("  {:<40} {:>12}  ({} of it in tensors)\n", "peak", human(p.peak), human(p.tensor_peak));
  out += fmt::format("  {:<40} {:>12}  ({})\n", "device memory", human(p.target.device_bytes), p.target.device_source);
  for (const PlanRow& r : p.host)
    out += fmt::format("  {:<40} {:>12}  {} (page-locked host memory)\n", r.name, human(r.bytes), r.detail);
  out += p.fits() ? fmt::format("  fits: {} to spare\n", human(p.target.device_bytes - p.peak))
                  : fmt::format("  does NOT fit: over by {}\n", human(p.peak - p.target.device_bytes));
  return out;
}

}  // namespace fsdp::plan
