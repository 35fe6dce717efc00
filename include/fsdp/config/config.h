// The run's configuration: YAML sections mirror the structs below one to one (after
// torchtitan's job config). Precedence: --set overrides > the file > the defaults here.
//
// One table of fields (src/config/schema.cpp: section, key, type, doc line, member,
// check) drives parsing, --set overrides, validation, dump_yaml and describe_keys; no key
// is handled outside it. Adding a key = a member here + one line in that table (+ a line in
// tests/data/config/full.yaml, which the tests keep complete).
//
// Everything is checked once, at start-up: an unknown key, a wrong type or an impossible
// value throws ConfigError with one message naming the place and the key, e.g.
//   configs/x.yaml:7: unknown key 'train.max_step' (did you mean 'train.max_steps'?)
//   --set optim.lr=abc: key 'optim.lr' expects a number, got 'abc'
// Checks over the resolved model shape (model.preset with the shape keys on top: heads that
// divide the width, train.seq_len within the context) are config errors too and blame the
// key set last; with model.init_from the shape is known only once its config.json is
// read, and those checks raise fail_key() then.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fsdp/core/dtype.h"
#include "fsdp/core/error.h"
#include "fsdp/fsdp/sharding_strategy.h"
#include "fsdp/model/llama_config.h"

namespace YAML {
class Node;
}

namespace fsdp::config {

class ConfigError : public fsdp::Error {
 public:
  using fsdp::Error::Error;
};

// Choices. The YAML spelling is what to_string returns. Dtypes are fsdp::DType, of which
// the config accepts F32 ("float32") and BF16 ("bfloat16").
enum class DataSource { Synthetic, Shards };
enum class LrSchedule { Cosine, Linear, Constant };
// The engine's enum (fsdp/fsdp/sharding_strategy.h); the config spells it in YAML.
using ShardingStrategy = fsdp::ShardingStrategy;

std::string_view to_string(DataSource v);        // "synthetic", "shards"
std::string_view to_string(LrSchedule v);        // "cosine", "linear", "constant"
std::string_view to_string(ShardingStrategy v);  // "FULL_SHARD", ...

// Each field's doc line lives in the table (schema.cpp) and is printed by describe_keys().
struct RunConfig {
  std::string dir = "runs/default";
  bool operator==(const RunConfig&) const = default;
};

struct ModelConfig {
  std::string preset = "tiny";  // model::llama_preset_names()
  std::string init_from;        // Hugging Face folder; "" = random init
  // Shape overrides: unset = the preset's value.
  std::optional<int> vocab_size;
  std::optional<int> hidden_size;
  std::optional<int> intermediate_size;
  std::optional<int> num_layers;
  std::optional<int> num_heads;
  std::optional<int> num_kv_heads;
  std::optional<int> max_seq_len;
  std::optional<double> rope_theta;
  std::optional<double> norm_eps;
  // Mixture of experts (Mixtral); unset = the preset's (0 experts: a dense MLP).
  std::optional<int> num_experts;
  std::optional<int> experts_per_token;
  std::optional<double> router_aux_loss_coef;
  std::optional<double> router_z_loss_coef;
  // Auxiliary-loss-free balancing (model/router_bias.h): the per-step nudge of each
  // expert's routing bias; 0 = off. A training setting, not the model's shape.
  double router_bias_update_rate = 0;
  // RoPE scaling (transformers' rope_scaling): none | linear | llama3; unset = the preset's
  // (or config.json's). The factors apply to the type in effect.
  std::optional<std::string> rope_scaling;
  std::optional<double> rope_scaling_factor;
  std::optional<double> rope_low_freq_factor;
  std::optional<double> rope_high_freq_factor;
  std::optional<int> rope_original_max_position_embeddings;
  std::optional<bool> tie_word_embeddings;  // the head reads the embedding table
  double init_std = 0.02;
  std::string quantization = "none";  // none | nf4: the frozen base's weights as NF4 (needs lora.enabled)
  bool operator==(const ModelConfig&) const = default;
};

// LoRA adapters on a frozen base (PEFT's LoraConfig; model/peft.h).
struct LoraConfig {
  bool enabled = false;
  int rank = 8;         // r
  double alpha = 16;    // lora_alpha
  double dropout = 0;   // lora_dropout
  std::vector<std::string> targets = {"q_proj", "v_proj"};  // PEFT's default for Llama
  bool rslora = false;  // use_rslora: scale alpha / sqrt(r)
  std::string init_from;  // a PEFT adapter folder to continue; "" = PEFT's initialisation
  bool operator==(const LoraConfig&) const = default;
};

struct DataConfig {
  // Shards unless the config says `source: synthetic`: a config without a data section is
  // refused for its missing data.path at start-up, never trained on made-up tokens.
  DataSource source = DataSource::Shards;
  std::string path;      // token shards (required when source is shards)
  std::string val_path;  // validation shards; "" = none
  int num_workers = 1;
  int prefetch = 2;  // at most kMaxPrefetch (config.cpp): each slot is a micro-batch of buffers
  int seed = 1234;
  // true: documents packed back to back into windows (SFT examples kept apart by document
  // masking; pretraining documents cross unless document_masking); false: one example per
  // row, padded, the pads masked (data/loader.h).
  bool packing = true;
  // Pretraining windows split into documents at the tokenizer's EOS (Llama 3): attention
  // and RoPE restart after each EOS. Packed SFT windows keep their examples apart anyway.
  bool document_masking = false;
  bool operator==(const DataConfig&) const = default;
};

struct TrainConfig {
  int max_steps = 100;
  int micro_batch_size = 8;
  int grad_accum_steps = 1;
  // Sequences per optimizer step over all ranks; 0 = micro_batch_size x grad_accum_steps x
  // ranks. Set, it decides grad_accum_steps on every world size (train/setup.h).
  int global_batch_size = 0;
  int seq_len = 128;
  int seed = 42;
  int log_every = 10;
  int eval_every = 0;      // 0 = never
  double grad_clip = 1.0;  // 0 = off
  DType dtype = DType::F32;  // compute dtype
  std::string device = "auto";  // auto | cpu | cuda (see Trainer: auto = cuda when a GPU is usable)
  bool tf32 = false;            // float32 GEMMs may use TF32 tensor cores
  double fp16_init_scale = 65536.0;  // dynamic loss scaling (dtype float16), torch.amp.GradScaler's defaults
  int fp16_growth_interval = 2000;
  std::string activation_checkpointing = "none";  // none | full | selective (model/activations.h)
  int activation_checkpointing_every = 1;         // blocks l with l % every == 0
  bool activation_offload = false;                // kept tensors of checkpointed blocks wait on the host
  int activation_offload_horizon = 2;             // blocks fetched back ahead of the backward
  bool allow_oversubscribe = false;               // train even when the memory plan says it cannot fit
  bool operator==(const TrainConfig&) const = default;
};

struct OptimConfig {
  double lr = 3e-4;
  double min_lr = 3e-5;
  int warmup_steps = 10;
  LrSchedule schedule = LrSchedule::Cosine;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  bool operator==(const OptimConfig&) const = default;
};

struct CheckpointConfig {
  std::string dir;          // "" = <run.dir>/checkpoints, see checkpoint_dir()
  std::string load_dir;     // "" = search dir
  int interval = 0;         // 0 = only at the end
  int keep_last = 3;
  std::string resume = "auto";  // auto | none | a checkpoint path
  bool async = false;
  bool stop_on_error = true;
  bool overwrite = false;  // a fresh run may move another run's checkpoints aside (train/run_ownership.h)
  bool operator==(const CheckpointConfig&) const = default;
};

// A mixture of experts' token dropping (model/moe_capacity.h; docs/expert-parallelism.md).
struct MoeConfig {
  double capacity_factor = 0;  // 0 = dropless; f > 0: each expert takes at most ceil(f N k / E) pairs per micro-batch
  bool operator==(const MoeConfig&) const = default;
};

// The device mesh's dimensions beside FSDP's (dist/mesh.h; docs/tensor-parallelism.md).
struct ParallelConfig {
  int tensor = 1;  // ranks each block's matrices, the vocabulary and the tokens are split over
  int expert = 1;  // ranks each MoE layer's experts are split over (docs/expert-parallelism.md)
  bool operator==(const ParallelConfig&) const = default;
};

struct FsdpConfig {
  ShardingStrategy sharding_strategy = ShardingStrategy::FULL_SHARD;
  DType param_dtype = DType::F32;
  DType reduce_dtype = DType::F32;
  int shard_group_size = 0;  // 0 = ranks per node
  int prefetch_limit = 2;
  bool operator==(const FsdpConfig&) const = default;
};

struct DistConfig {
  double timeout_s = 600;  // the collective watchdog (dist/watchdog.h); 0 = off
  bool operator==(const DistConfig&) const = default;
};

struct LoggingConfig {
  std::string level = "info";  // trace | debug | info | warn (or warning) | error
  bool metrics = true;         // write <run.dir>/metrics.jsonl
  // A trace of global steps (wait, wait + warmup] recorded and dropped, then the next
  // `active` steps written (torch.profiler.schedule); 0 active steps = no trace.
  int profile_wait = 1;
  int profile_warmup = 1;
  int profile_active = 0;
  std::string profile_dir;       // "" = <run.dir>/traces, see profile_dir()
  int memory_snapshot_step = 0;  // 0 = none
  bool tensorboard = false;      // <run.dir>/tensorboard/events.out.tfevents.* on rank 0
  bool strict = false;           // an output that cannot be written stops the run
  bool operator==(const LoggingConfig&) const = default;
};

struct EvalConfig {
  int batches = 10;
  std::string split = "val";  // the <split>_*.idx shards evaluated (train: the training data)
  bool operator==(const EvalConfig&) const = default;
};

// Where each key's value came from, kept for errors found after loading (the GPU a rank
// sees, a model folder's context length): "configs/x.yaml:7" or "--set train.device=cuda";
// `file` for keys left at their defaults. Provenance, not configuration: two configs with
// the same values are equal wherever their values came from.
struct KeyOrigins {
  std::string file = "config";
  std::map<std::string, std::string, std::less<>> where;  // "train.device" -> "configs/x.yaml:7"
  bool operator==(const KeyOrigins&) const { return true; }
};

struct Config {
  RunConfig run;
  ModelConfig model;
  LoraConfig lora;
  DataConfig data;
  TrainConfig train;
  OptimConfig optim;
  CheckpointConfig checkpoint;
  ParallelConfig parallel;
  MoeConfig moe;
  FsdpConfig fsdp;
  DistConfig dist;
  LoggingConfig logging;
  EvalConfig eval;
  KeyOrigins origins;
  bool operator==(const Config&) const = default;
};

// A config error found after loading, in the loader's words: "<where the key was set>:
// key '<key>' <what>" (exit 2, as for any config error).
[[noreturn]] void fail_key(const Config& cfg, std::string_view key, const std::string& what);

// Reads the YAML file, applies the overrides ("section.key=value", the text after --set;
// value parsed as a YAML scalar) in order, then validates. Throws ConfigError.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// The same from text; display_name stands for the file in messages ("configs/x.yaml").
// Empty text = all defaults (then overrides), e.g. when no --config was given.
Config load_config_string(const std::string& yaml_text, const std::string& display_name,
                          const std::vector<std::string>& overrides = {});

// Checks every field and the cross-field rules of a Config built in code; messages say
// "config: key '...' ..." since there is no file. load_config* already call it.
void validate(const Config& cfg);

// The effective config as YAML: every key, sections and keys in table order, unset shape
// overrides as null. Loading it back gives an equal Config.
std::string dump_yaml(const Config& cfg);

// FNV-1a (64-bit) of dump_yaml: equal on every rank iff the configs are equal.
uint64_t config_hash(const Config& cfg);

// Every key with its type, default and doc line, grouped by section (for --help).
std::string describe_keys();

// checkpoint.dir, or <run.dir>/checkpoints when it is empty.
std::string checkpoint_dir(const Config& cfg);
// logging.profile_dir, or <run.dir>/traces when it is empty.
std::string profile_dir(const Config& cfg);

// The model shape `base` (a preset, or a model folder's config.json) with the shape keys
// the config sets (model.vocab_size, ...) written over it. No checks.
model::LlamaConfig apply_shape_keys(const ModelConfig& m, model::LlamaConfig base);

namespace detail {
// One row of the field table. Shared by schema.cpp (which fills it) and config.cpp (which
// walks it); not for callers.
struct Field {
  std::string_view section, key;
  std::string type;  // "integer", "number", "bool", "string" or "a | b | c"
  std::string_view doc;
  // Stores the node's value; returns "" or what is wrong ("expects an integer, got 'x'").
  std::function<std::string(Config&, const YAML::Node&)> read;
  std::function<std::string(const Config&)> write;  // the value as a YAML scalar
  std::function<std::string(const Config&)> check;  // "" or "must be > 0, got -1"
};
struct Section {
  std::string_view name, doc;
};
std::span<const Field> fields();      // in dump order
std::span<const Section> sections();  // in dump order
}  // namespace detail

}  // namespace fsdp::config
