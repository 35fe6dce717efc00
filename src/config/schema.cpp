// The field table: every config key with its type, doc line and check; its default is
// the member initialiser in config.h. Parsing, --set overrides, validation, dump_yaml and
// describe_keys (config.cpp) all walk this table, so a key added here is known everywhere.
//
// Values are typed by the table, not by YAML's tags: `dir: 123` is the string "123" and
// `lr: "1e-3"` is the number 0.001. An empty value (`key:` or `key: null`) means "" for a
// string and "unset" for an optional shape override; for any other type it is an error.
// How each type is read, written and named is field_values.h.
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "field_values.h"
#include "fsdp/config/config.h"
#include "fsdp/core/cli_args.h"
#include "fsdp/model/llama_config.h"
#include "fsdp/model/rope_scaling.h"

namespace fsdp::config {
namespace {

using namespace field_values;  // the rows are written in their terms

// ---- Checks: each returns "" or what is wrong with the value --------------------------
template <class T>
std::string show(const T& v) {
  if constexpr (std::is_same_v<T, std::string>) return fmt::format("'{}'", v);
  else return fmt::format("{}", v);
}

auto gt(double lo) {
  return [lo](const auto& v) -> std::string {
    return v > lo ? "" : fmt::format("must be > {}, got {}", lo, show(v));
  };
}
auto ge(double lo) {
  return [lo](const auto& v) -> std::string {
    return v >= lo ? "" : fmt::format("must be >= {}, got {}", lo, show(v));
  };
}
auto finite_ge(double lo) {  // what ge(lo) passes but .inf
  return [lo](const double& v) -> std::string {
    return std::isfinite(v) && v >= lo ? "" : fmt::format("must be a finite number >= {}, got {}", lo, v);
  };
}
auto in_range(double lo, double hi) {
  return [lo, hi](const auto& v) -> std::string {
    return v >= lo && v <= hi ? "" : fmt::format("must be in [{}, {}], got {}", lo, hi, show(v));
  };
}
auto in_unit_interval() {  // [0, 1): Adam's betas
  return [](const double& v) -> std::string {
    return v >= 0 && v < 1 ? "" : fmt::format("must be in [0, 1), got {}", v);
  };
}
// The RoPE scaling types the model implements (model/rope_scaling.h); any other type
// transformers knows is refused by name.
auto rope_scaling_choice() {
  return [](const std::string& v) -> std::string {
    try {
      model::rope_scaling_type(v);
      return "";
    } catch (const fsdp::Error&) {
      return fmt::format("must be one of none, linear, llama3, got '{}' (dynamic, yarn, longrope and the other "
                         "transformers types are not implemented)", v);
    }
  };
}
// A shard name prefix: train, val, or any <name> of <name>_00000.idx; never a path.
auto split_name() {
  return [](const std::string& v) -> std::string {
    if (v.empty()) return "must not be empty (val, train, or the <name> of <name>_*.idx shards)";
    if (v.find('/') != std::string::npos) return fmt::format("must be a shard name, not a path, got '{}'", v);
    return "";
  };
}
auto not_empty(std::string_view hint) {
  return [hint](const std::string& v) -> std::string {
    return v.empty() ? fmt::format("must not be empty ({})", hint) : "";
  };
}

// Adds the rows of one section: .add(key, member, doc, check).
template <class S>
class SectionRows {
 public:
  SectionRows(std::vector<detail::Field>& out, std::string_view name, S Config::*section)
      : out_(out), name_(name), section_(section) {}

  template <class T>
  SectionRows& add(std::string_view key, T S::*member, std::string_view doc,
                   std::function<std::string(const typename Unwrap<T>::type&)> check = {}) {
    return add_row(key, member, doc, type_name<T>(), std::move(check));
  }

  // A string restricted to a list of names that other modules interpret (model presets,
  // log levels); an enum would make this module the owner of those lists.
  SectionRows& add_one_of(std::string_view key, std::string S::*member, std::string_view doc,
                          std::vector<std::string_view> names) {
    std::string list;
    for (std::string_view n : names) list += (list.empty() ? "" : " | ") + std::string(n);
    auto check = [names, list](const std::string& v) -> std::string {
      for (std::string_view n : names)
        if (v == n) return "";
      std::string commas = list;
      for (size_t p; (p = commas.find(" | ")) != std::string::npos;) commas.replace(p, 3, ", ");
      const std::string guess = closest_value(v, std::vector<std::string>(names.begin(), names.end()));
      return fmt::format("must be one of {}, got '{}'{}", commas, v,
                         guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess));
    };
    return add_row(key, member, doc, list, check);
  }

 private:
  template <class T>
  SectionRows& add_row(std::string_view key, T S::*member, std::string_view doc, std::string type,
                       std::function<std::string(const typename Unwrap<T>::type&)> check) {
    const auto section = section_;
    out_.push_back(detail::Field{
        .section = name_,
        .key = key,
        .type = std::move(type),
        .doc = doc,
        .read = [section, member](Config& c, const YAML::Node& n) { return read_value(n, (c.*section).*member); },
        .write = [section, member](const Config& c) { return write_value((c.*section).*member); },
        .check = [section, member, check](const Config& c) -> std::string {
          const T& v = (c.*section).*member;
          if (!check) return "";
          if constexpr (Unwrap<T>::optional) return v ? check(*v) : "";
          else return check(v);
        },
    });
    return *this;
  }

  std::vector<detail::Field>& out_;
  std::string_view name_;
  S Config::*section_;
};

// ---- The rows, one function a section ---------------------------------------------------
void add_run_rows(std::vector<detail::Field>& t) {
  SectionRows(t, "run", &Config::run)
      .add("dir", &RunConfig::dir, "Run directory: logs, metrics.jsonl and, by default, checkpoints.",
           not_empty("the run directory"));
}

void add_model_rows(std::vector<detail::Field>& t) {
  SectionRows(t, "model", &Config::model)
      .add_one_of("preset", &ModelConfig::preset, "Architecture preset; the keys below override single dimensions.",
                  model::llama_preset_names())
      .add("init_from", &ModelConfig::init_from,
           "Hugging Face folder (config.json + safetensors) to start from; empty = random init.")
      .add("vocab_size", &ModelConfig::vocab_size, "Vocabulary size; null = the preset's.", gt(0))
      .add("hidden_size", &ModelConfig::hidden_size, "Model width; null = the preset's.", gt(0))
      .add("intermediate_size", &ModelConfig::intermediate_size, "SwiGLU inner width; null = the preset's.", gt(0))
      .add("num_layers", &ModelConfig::num_layers, "Transformer blocks; null = the preset's.", gt(0))
      .add("num_heads", &ModelConfig::num_heads, "Query heads; must divide hidden_size; null = the preset's.", gt(0))
      .add("num_kv_heads", &ModelConfig::num_kv_heads,
           "Key/value heads (grouped-query attention); must divide num_heads; null = the preset's.", gt(0))
      .add("max_seq_len", &ModelConfig::max_seq_len, "Longest sequence the RoPE tables cover; null = the preset's.",
           gt(0))
      .add("rope_theta", &ModelConfig::rope_theta, "RoPE base frequency; null = the preset's.", gt(0))
      .add("norm_eps", &ModelConfig::norm_eps, "RMSNorm epsilon; null = the preset's.", gt(0))
      .add("num_experts", &ModelConfig::num_experts,
           "Experts per MoE block (Mixtral: 8); 0 = a dense SwiGLU MLP; null = the preset's.", ge(0))
      .add("experts_per_token", &ModelConfig::experts_per_token,
           "Experts each token is routed to (top-k; Mixtral: 2); null = the preset's.", ge(0))
      .add("router_aux_loss_coef", &ModelConfig::router_aux_loss_coef,
           "Weight of the load-balancing loss (transformers' load_balancing_loss_func); null = the preset's.", ge(0))
      .add("router_z_loss_coef", &ModelConfig::router_z_loss_coef,
           "Weight of the router z-loss, mean logsumexp(router logits)^2 (ST-MoE); null = the preset's.", ge(0))
      .add("router_bias_update_rate", &ModelConfig::router_bias_update_rate,
           "Auxiliary-loss-free load balancing (DeepSeek-V3, torchtitan): after every step each expert's routing "
           "bias moves by this much towards the mean load (sign of mean - load); the bias picks the top-k "
           "experts, never their weights. 0 = off. Needs model.num_experts > 0.",
           finite_ge(0))
      .add("rope_scaling", &ModelConfig::rope_scaling,
           "RoPE scaling for a longer context: none, linear (every frequency / factor) or llama3 (Llama 3.1's: "
           "low frequencies / factor, high ones kept); null = the preset's or config.json's.",
           rope_scaling_choice())
      .add("rope_scaling_factor", &ModelConfig::rope_scaling_factor,
           "RoPE scaling factor (Llama 3.1: 8); null = the preset's or config.json's.", ge(1))
      .add("rope_low_freq_factor", &ModelConfig::rope_low_freq_factor,
           "llama3 scaling: wavelengths above original / this are scaled (Llama 3.1: 1); null = the preset's.", gt(0))
      .add("rope_high_freq_factor", &ModelConfig::rope_high_freq_factor,
           "llama3 scaling: wavelengths below original / this are kept (Llama 3.1: 4); null = the preset's.", gt(0))
      .add("rope_original_max_position_embeddings", &ModelConfig::rope_original_max_position_embeddings,
           "llama3 scaling: the pretraining context (Llama 3.1: 8192); null = the preset's.", gt(0))
      .add("tie_word_embeddings", &ModelConfig::tie_word_embeddings,
           "The output head reads the embedding table instead of its own weight (Llama 3.2 1B/3B); null = the "
           "preset's or config.json's.")
      .add("init_std", &ModelConfig::init_std, "Standard deviation of the random initialisation.", gt(0))
      .add_one_of("quantization", &ModelConfig::quantization,
                  "nf4 = store the frozen base's block matrices as bitsandbytes NF4 (4-bit NormalFloat, blocks of 64, "
                  "double-quantized absmax: QLoRA); needs lora.enabled. none = dense.",
                  {"none", "nf4"});
}

void add_lora_rows(std::vector<detail::Field>& t) {
  SectionRows(t, "lora", &Config::lora)
      .add("enabled", &LoraConfig::enabled,
           "Fine-tune LoRA adapters on a frozen base: only the adapters train, are reduced and are checkpointed.")
      .add("rank", &LoraConfig::rank, "The adapters' rank r (PEFT's r).", ge(1))
      .add("alpha", &LoraConfig::alpha, "lora_alpha: the update is scaled by alpha / r (alpha / sqrt(r) with rslora).",
           gt(0))
      .add("dropout", &LoraConfig::dropout, "Dropout on the adapters' input (lora_dropout), in [0, 1).",
           [](const double& v) -> std::string {
             return v >= 0 && v < 1 ? "" : fmt::format("must be in [0, 1), got {}", v);
           })
      .add("targets", &LoraConfig::targets,
           "Modules that get adapters: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj (Mixtral: gate, "
           "w1, w2, w3), or all-linear; a YAML list or comma-separated.",
           [](const std::vector<std::string>& v) -> std::string { return v.empty() ? "must name at least one module" : ""; })
      .add("rslora", &LoraConfig::rslora, "Rank-stabilised LoRA: scale alpha / sqrt(r) instead of alpha / r.")
      .add("init_from", &LoraConfig::init_from,
           "A PEFT adapter folder (adapter_config.json + adapter_model.safetensors) to continue from; empty = A "
           "Kaiming-uniform, B zeros (PEFT's initialisation).");
}

void add_data_rows(std::vector<detail::Field>& t) {
  SectionRows(t, "data", &Config::data)
      .add("source", &DataConfig::source,
           "Where batches come from: token shards at data.path, or (only when written) a seeded synthetic Markov chain "
           "for smoke tests.")
      .add("path", &DataConfig::path, "Directory of token shards from `fsdp_train prepare` (train_*.bin/.idx), or a Megatron shard prefix; required when source is shards.")
      .add("val_path", &DataConfig::val_path, "Directory or prefix of validation shards; empty = the val_* shards in data.path.")
      // Bounds far above any use (torch's DataLoader prefetches 2 per worker): each prefetch
      // slot holds a micro-batch, each worker is a thread, allocated at start.
      .add("num_workers", &DataConfig::num_workers, "Loader threads; 0 = load on the training thread.",
           in_range(0, 256))
      .add("prefetch", &DataConfig::prefetch, "Micro-batches the loader prepares ahead of the step; 0 = none.",
           in_range(0, 1024))
      .add("seed", &DataConfig::seed, "Seed of the data order (shuffling, synthetic tokens).", ge(0))
      .add("packing", &DataConfig::packing,
           "true: SFT data (shards with loss masks) has whole examples packed best-fit into seq_len windows, attention "
           "and RoPE positions restarting at each example; pretraining data its documents back to back (see "
           "document_masking); false: one example per row, padded, the pads masked out of the loss.")
      .add("document_masking", &DataConfig::document_masking,
           "true: split pretraining windows into documents after each EOS token (the manifest's eos_id), as Llama 3 "
           "does: a token attends only to its own document, RoPE positions restart, and no target crosses a "
           "boundary.");
}

void add_train_rows(std::vector<detail::Field>& t) {
  SectionRows(t, "train", &Config::train)
      .add("max_steps", &TrainConfig::max_steps, "Optimizer steps to run.", gt(0))
      .add("micro_batch_size", &TrainConfig::micro_batch_size, "Sequences per rank per forward/backward pass.", gt(0))
      .add("grad_accum_steps", &TrainConfig::grad_accum_steps,
           "Micro-batches accumulated into one optimizer step (derived from global_batch_size when that is set).",
           ge(1))
      .add("global_batch_size", &TrainConfig::global_batch_size,
           "Sequences per optimizer step over all ranks, kept on any number of ranks: grad_accum_steps = this / "
           "(micro_batch_size x ranks), which must divide it; 0 = micro_batch_size x grad_accum_steps x ranks.",
           ge(0))
      .add("seq_len", &TrainConfig::seq_len, "Tokens per sequence.", gt(0))
      .add("seed", &TrainConfig::seed, "Seed of parameter init and every other random stream.", ge(0))
      .add("log_every", &TrainConfig::log_every, "Steps between log lines (metrics.jsonl records every step).", ge(1))
      .add("eval_every", &TrainConfig::eval_every, "Steps between evaluations; 0 = never.", ge(0))
      .add("grad_clip", &TrainConfig::grad_clip, "Clip the global gradient norm to this; 0 = off.", ge(0))
      .add("dtype", &TrainConfig::dtype,
           "Compute dtype of forward and backward (master weights stay float32); bfloat16 and float16 need "
           "train.device cuda.")
      .add_one_of("device", &TrainConfig::device,
                  "Where the model computes: cuda = one GPU per local rank (NCCL between them); auto = cuda when this "
                  "build has the CUDA backend and a GPU is visible, else cpu.",
                  {"auto", "cpu", "cuda"})
      .add("tf32", &TrainConfig::tf32, "Let float32 GEMMs on the GPU use TF32 tensor cores (torch's allow_tf32).")
      .add("fp16_init_scale", &TrainConfig::fp16_init_scale,
           "float16 only: initial loss scale of dynamic loss scaling (halved on inf/NaN gradients, doubled after "
           "fp16_growth_interval clean steps).",
           gt(0))
      .add("fp16_growth_interval", &TrainConfig::fp16_growth_interval,
           "float16 only: clean steps before the loss scale doubles.", ge(1))
      .add_one_of("activation_checkpointing", &TrainConfig::activation_checkpointing,
                  "full = a checkpointed block keeps only its input and runs its forward again in backward "
                  "(same bits, about one more forward of compute); selective = it also keeps its GEMM and "
                  "attention outputs and recomputes only norms, SwiGLU and MoE gathers (less saved, little "
                  "compute); none = keep every activation.",
                  {"none", "full", "selective"})
      .add("activation_checkpointing_every", &TrainConfig::activation_checkpointing_every,
           "With full or selective: checkpoint every Nth block (blocks 0, N, 2N, ...); 1 = every block; at most "
           "the model's layers.",
           ge(1))
      .add("activation_offload", &TrainConfig::activation_offload,
           "Move what each checkpointed block keeps to host memory (page-locked on a GPU) during the forward and "
           "back before its backward, on a copy stream; needs activation_checkpointing.")
      .add("activation_offload_horizon", &TrainConfig::activation_offload_horizon,
           "With activation_offload: checkpointed blocks fetched back ahead of the backward (SMP's "
           "activation_loading_horizon); the device holds max(horizon + 1, 3) blocks' kept tensors.",
           ge(1))
      .add("allow_oversubscribe", &TrainConfig::allow_oversubscribe,
           "Train even when the memory plan (`fsdp_train plan`) says a rank's peak exceeds its device memory; "
           "otherwise such a run is refused at start-up with the plan's table (exit 2).");
}

void add_optim_rows(std::vector<detail::Field>& t) {
  SectionRows(t, "optim", &Config::optim)
      .add("lr", &OptimConfig::lr, "Peak learning rate (AdamW), reached after warmup.", gt(0))
      .add("min_lr", &OptimConfig::min_lr, "Learning rate at the end of the decay; at most lr.", ge(0))
      .add("warmup_steps", &OptimConfig::warmup_steps, "Steps of linear warmup from 0 to lr.", ge(0))
      .add("schedule", &OptimConfig::schedule, "Decay from lr to min_lr after warmup.")
      .add("weight_decay", &OptimConfig::weight_decay, "Decoupled weight decay (AdamW).", ge(0))
      .add("beta1", &OptimConfig::beta1, "Adam first-moment decay.", in_unit_interval())
      .add("beta2", &OptimConfig::beta2, "Adam second-moment decay.", in_unit_interval())
      .add("eps", &OptimConfig::eps, "Adam denominator epsilon.", gt(0));
}

void add_checkpoint_rows(std::vector<detail::Field>& t) {
  SectionRows(t, "checkpoint", &Config::checkpoint)
      .add("dir", &CheckpointConfig::dir, "Where checkpoints are written; empty = <run.dir>/checkpoints.")
      .add("load_dir", &CheckpointConfig::load_dir, "Where resume looks for checkpoints; empty = checkpoint.dir.")
      .add("interval", &CheckpointConfig::interval, "Steps between checkpoints; 0 = only at the end.", ge(0))
      .add("keep_last", &CheckpointConfig::keep_last, "Complete checkpoints kept; older ones are deleted.", ge(1))
      .add("resume", &CheckpointConfig::resume,
           "auto = newest complete checkpoint if any, none = start fresh, or a checkpoint path.",
           not_empty("auto, none or a checkpoint path"))
      .add("async", &CheckpointConfig::async, "Write checkpoints in the background while training goes on.")
      .add("stop_on_error", &CheckpointConfig::stop_on_error,
           "A failed save stops the run (exit 1); false = log the error and keep training (a failed final save "
           "still exits 1). Either way the previous checkpoints are untouched.")
      .add("overwrite", &CheckpointConfig::overwrite,
           "A run may start in a checkpoint.dir holding another run's checkpoints: they are moved aside into "
           "<checkpoint.dir>/replaced-<time>/ (and metrics.jsonl beside itself). false = refuse to start.");
}

void add_parallel_rows(std::vector<detail::Field>& t) {
  SectionRows(t, "parallel", &Config::parallel)
      .add("tensor", &ParallelConfig::tensor,
           "Tensor-parallel degree T: consecutive ranks of one node split each block's matrices (q/k/v, gate/up by "
           "rows; o, down by columns), the vocabulary and each micro-batch's tokens (sequence parallelism); FSDP "
           "shards over the rest. Must divide the ranks per node, the heads, the key/value heads, the MLP width, "
           "the vocabulary and train.seq_len; 1 = off.",
           ge(1))
      .add("expert", &ParallelConfig::expert,
           "Expert-parallel degree E (Mixtral): each MoE layer's experts are split over E data-parallel ranks, "
           "num_experts / E whole experts each, and tokens travel to their experts by all-to-all; the other "
           "parameters stay FSDP-sharded as without it. Must divide model.num_experts and the shard group "
           "(HYBRID_SHARD, HYBRID_SHARD_ZERO2: fsdp.shard_group_size); 1 = off.",
           ge(1));
}

void add_moe_rows(std::vector<detail::Field>& t) {
  SectionRows(t, "moe", &Config::moe)
      .add("capacity_factor", &MoeConfig::capacity_factor,
           "Expert capacity factor f: each expert takes at most ceil(f x tokens x top-k / num_experts) (token, "
           "choice) pairs of a micro-batch and drops its lowest-probability ones beyond (Megatron's 'probs' "
           "policy); the drops are counted in the step line and metrics.jsonl. 0 = dropless (every pair computed).",
           finite_ge(0));
}

void add_fsdp_rows(std::vector<detail::Field>& t) {
  SectionRows(t, "fsdp", &Config::fsdp)
      .add("sharding_strategy", &FsdpConfig::sharding_strategy,
           "What is sharded, as PyTorch FSDP names it: everything, parameters freed after forward / everything, "
           "parameters kept gathered until backward / nothing (DDP) / FULL_SHARD within a shard group, replicated "
           "across groups / SHARD_GRAD_OP within a shard group (PyTorch's _HYBRID_SHARD_ZERO2, a spelling also "
           "read).")
      .add("param_dtype", &FsdpConfig::param_dtype, "Dtype parameters are all-gathered in.")
      .add("reduce_dtype", &FsdpConfig::reduce_dtype, "Dtype gradients are reduce-scattered in.")
      .add("shard_group_size", &FsdpConfig::shard_group_size,
           "Ranks a unit is sharded over (HYBRID_SHARD, HYBRID_SHARD_ZERO2); 0 = the ranks of one node. With parallel.tensor T these "
           "are data-parallel ranks (each holding one tensor rank's slices): 0 = a node's ranks / T.",
           ge(0))
      .add("prefetch_limit", &FsdpConfig::prefetch_limit, "Units whose all-gather may run ahead of compute.", ge(0));
}

void add_dist_rows(std::vector<detail::Field>& t) {
  SectionRows(t, "dist", &Config::dist)
      .add("timeout_s", &DistConfig::timeout_s,
           "Seconds a collective may wait for the other ranks (a rank killed, stopped or stuck in I/O) before every "
           "rank reports who did not arrive and the job exits with code 76 (requeue: resume from the last "
           "checkpoint); 0 = wait forever.",
           [](const double& v) -> std::string {
             return v >= 0 && v <= 1e6 ? "" : fmt::format("must be between 0 (off) and 1e6 seconds, got {}", v);
           });
}

void add_logging_rows(std::vector<detail::Field>& t) {
  SectionRows(t, "logging", &Config::logging)
      .add_one_of("level", &LoggingConfig::level,
                  "Log level of the console and <run.dir>/train.log (debug adds the effective config and the memory "
                  "plan's table).",
                  {"trace", "debug", "info", "warn", "warning", "error"})
      .add("metrics", &LoggingConfig::metrics, "Also write every logged step to <run.dir>/metrics.jsonl.")
      .add("profile_wait", &LoggingConfig::profile_wait,
           "Trace schedule (torch.profiler.schedule over global steps): steps before the warmup.", ge(0))
      .add("profile_warmup", &LoggingConfig::profile_warmup,
           "Trace schedule: steps recorded and dropped before the active ones (the tracer warms up).", ge(0))
      .add("profile_active", &LoggingConfig::profile_active,
           "Trace schedule: steps recorded into <profile_dir>/rank_<r>.trace.json (Chrome trace format, opens in "
           "Perfetto); 0 = no trace.",
           ge(0))
      .add("profile_dir", &LoggingConfig::profile_dir,
           "Where traces and memory snapshots go; empty = <run.dir>/traces.")
      .add("memory_snapshot_step", &LoggingConfig::memory_snapshot_step,
           "Write each rank's live allocations by category at the memory peak of this step "
           "(<profile_dir>/rank_<r>.memory_step_<N>.json); 0 = never.",
           ge(0))
      .add("tensorboard", &LoggingConfig::tensorboard,
           "Rank 0 writes every metrics.jsonl scalar to <run.dir>/tensorboard/events.out.tfevents.<time>.<host>.")
      .add("strict", &LoggingConfig::strict,
           "A trace, memory snapshot or TensorBoard file that cannot be written stops the run (exit 1); false = "
           "log it once and train on without that output.");
}

void add_eval_rows(std::vector<detail::Field>& t) {
  SectionRows(t, "eval", &Config::eval)
      .add("batches", &EvalConfig::batches,
           "Validation batches per evaluation; 0 = every sample of the split once (an SFT split's examples).", ge(0))
      .add("split", &EvalConfig::split,
           "Shards evaluated: <split>_*.idx in data.val_path, or in data.path when that is empty (train = the "
           "training data itself, for a corpus prepared without --val-fraction).",
           split_name());
}

// The sections in the order --help and dump_yaml list them.
std::vector<detail::Field> build_table() {
  std::vector<detail::Field> t;
  add_run_rows(t);
  add_model_rows(t);
  add_lora_rows(t);
  add_data_rows(t);
  add_train_rows(t);
  add_optim_rows(t);
  add_checkpoint_rows(t);
  add_parallel_rows(t);
  add_moe_rows(t);
  add_fsdp_rows(t);
  add_dist_rows(t);
  add_logging_rows(t);
  add_eval_rows(t);
  return t;
}

}  // namespace

std::string_view to_string(DataSource v) { return name_of(v); }
std::string_view to_string(LrSchedule v) { return name_of(v); }
std::string_view to_string(ShardingStrategy v) { return name_of(v); }

namespace detail {

std::span<const Field> fields() {
  static const std::vector<Field> table = build_table();
  return table;
}

std::span<const Section> sections() {
  static constexpr Section list[] = {
      {"run", "The run directory."},
      {"model", "Architecture: a preset, optional shape overrides, initialisation."},
      {"lora", "Parameter-efficient fine-tuning: LoRA adapters on a frozen (optionally NF4) base."},
      {"data", "Where training batches come from."},
      {"train", "The training loop."},
      {"optim", "AdamW and the learning-rate schedule."},
      {"checkpoint", "Saving and resuming."},
      {"parallel", "Parallel dimensions beside FSDP: tensor (and sequence) parallelism, expert parallelism."},
      {"moe", "A mixture of experts' token dropping: the expert capacity."},
      {"fsdp", "Sharding and mixed precision."},
      {"dist", "Communication between ranks: the collective watchdog."},
      {"logging", "Console log, metrics.jsonl, TensorBoard, traces and memory snapshots."},
      {"eval", "Evaluation on data.val_path (or a split of data.path)."},
  };
  return list;
}

}  // namespace detail
}  // namespace fsdp::config
