// The config module: defaults, a full file, --set overrides, every kind of error (checked
// by its whole message, so the file:line and the key are pinned), dump_yaml round trips
// and the hash.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "fsdp/config/config.h"
#include "fsdp/config/model_options.h"

namespace fsdp::config {
namespace {

const std::string kDataDir = std::string(FSDP_SOURCE_DIR) + "/tests/data/config/";

// The message of the ConfigError that loading throws, or "no error".
std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    load_config_string(yaml, "configs/x.yaml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

std::string file_error_of(const std::string& path, const std::vector<std::string>& overrides = {}) {
  try {
    load_config(path, overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

// ---- Defaults -----------------------------------------------------------------------------
TEST(ConfigDefaults, EmptyTextGivesTheDocumentedDefaults) {
  const Config c = load_config_string("", "none");
  EXPECT_EQ(c, Config{});
  EXPECT_EQ(c.run.dir, "runs/default");
  EXPECT_EQ(c.model.preset, "tiny");
  EXPECT_FALSE(c.model.hidden_size.has_value());
  EXPECT_DOUBLE_EQ(c.model.init_std, 0.02);
  // Token shards unless a config says synthetic (then data.path is required at start-up).
  EXPECT_EQ(c.data.source, DataSource::Shards);
  EXPECT_EQ(c.data.path, "");
  EXPECT_EQ(c.train.global_batch_size, 0);
  EXPECT_EQ(c.data.seed, 1234);
  EXPECT_EQ(c.train.max_steps, 100);
  EXPECT_EQ(c.train.micro_batch_size, 8);
  EXPECT_EQ(c.train.seq_len, 128);
  EXPECT_EQ(c.train.dtype, DType::F32);
  EXPECT_DOUBLE_EQ(c.optim.lr, 3e-4);
  EXPECT_DOUBLE_EQ(c.optim.min_lr, 3e-5);
  EXPECT_EQ(c.optim.schedule, LrSchedule::Cosine);
  EXPECT_DOUBLE_EQ(c.optim.eps, 1e-8);
  EXPECT_EQ(c.checkpoint.resume, "auto");
  EXPECT_FALSE(c.checkpoint.async);
  EXPECT_EQ(c.fsdp.sharding_strategy, ShardingStrategy::FULL_SHARD);
  EXPECT_DOUBLE_EQ(c.dist.timeout_s, 600);  // NCCL's default
  EXPECT_EQ(c.logging.level, "info");
  EXPECT_TRUE(c.logging.metrics);
  EXPECT_EQ(c.logging.profile_wait, 1);
  EXPECT_EQ(c.logging.profile_warmup, 1);
  EXPECT_EQ(c.logging.profile_active, 0);
  EXPECT_EQ(c.logging.memory_snapshot_step, 0);
  EXPECT_FALSE(c.logging.tensorboard);
  EXPECT_FALSE(c.logging.strict);
  EXPECT_EQ(c.eval.batches, 10);
  EXPECT_EQ(c.eval.split, "val");
  EXPECT_FALSE(c.model.rope_scaling.has_value());  // the preset's (or config.json's)
  EXPECT_FALSE(c.model.tie_word_embeddings.has_value());
  EXPECT_NO_THROW(validate(Config{}));
}

TEST(ConfigDefaults, CommentsAndEmptySectionsKeepDefaults) {
  EXPECT_EQ(load_config_string("# nothing here\n", "x"), Config{});
  EXPECT_EQ(load_config_string("train:\noptim:\n", "x"), Config{});
}

TEST(ConfigDefaults, CheckpointDirFollowsRunDir) {
  Config c;
  c.run.dir = "runs/a";
  EXPECT_EQ(checkpoint_dir(c), "runs/a/checkpoints");
  c.checkpoint.dir = "/ckpt";
  EXPECT_EQ(checkpoint_dir(c), "/ckpt");
}

TEST(ConfigDefaults, ProfileDirFollowsRunDir) {
  Config c;
  c.run.dir = "runs/a";
  EXPECT_EQ(profile_dir(c), "runs/a/traces");
  c.logging.profile_dir = "/scratch/traces";
  EXPECT_EQ(profile_dir(c), "/scratch/traces");
}

TEST(ConfigOverride, ObservabilityKeys) {
  const Config c = load_config_string("logging:\n  profile_active: 2\n", "x",
                                      {"logging.profile_wait=4", "logging.profile_warmup=0", "logging.tensorboard=true",
                                       "logging.memory_snapshot_step=3", "logging.strict=true",
                                       "logging.profile_dir=/tmp/t"});
  EXPECT_EQ(c.logging.profile_active, 2);
  EXPECT_EQ(c.logging.profile_wait, 4);
  EXPECT_EQ(c.logging.profile_warmup, 0);
  EXPECT_TRUE(c.logging.tensorboard);
  EXPECT_EQ(c.logging.memory_snapshot_step, 3);
  EXPECT_TRUE(c.logging.strict);
  EXPECT_EQ(c.logging.profile_dir, "/tmp/t");
  EXPECT_EQ(error_of("logging:\n  profile_active: -1\n"),
            "configs/x.yaml:2: key 'logging.profile_active' must be >= 0, got -1");
  EXPECT_EQ(error_of("logging:\n  profile_wait: -2\n"), "configs/x.yaml:2: key 'logging.profile_wait' must be >= 0, got -2");
  EXPECT_EQ(error_of("logging:\n  memory_snapshot_step: -1\n"),
            "configs/x.yaml:2: key 'logging.memory_snapshot_step' must be >= 0, got -1");
  EXPECT_EQ(error_of("logging:\n  tensorboard: yes please\n"),
            "configs/x.yaml:2: key 'logging.tensorboard' expects true or false, got 'yes please'");
}

TEST(ConfigDefaults, ChoicesSpellTheirYamlNames) {
  EXPECT_EQ(to_string(DataSource::Shards), "shards");
  EXPECT_EQ(to_string(LrSchedule::Constant), "constant");
  EXPECT_EQ(to_string(ShardingStrategy::SHARD_GRAD_OP), "SHARD_GRAD_OP");
  EXPECT_EQ(to_string(ShardingStrategy::HYBRID_SHARD_ZERO2), "HYBRID_SHARD_ZERO2");
}

// PyTorch's names mean PyTorch's behaviour: HYBRID_SHARD reshards after forward as
// FULL_SHARD does, HYBRID_SHARD_ZERO2 (PyTorch's _HYBRID_SHARD_ZERO2, spelled either way)
// keeps units gathered as SHARD_GRAD_OP does; both shard within a group. The private
// spelling reads as the public one and is written (dump_yaml, manifests) as the public one.
TEST(ConfigFsdp, HybridShardZero2IsPyTorchsPrivateStrategy) {
  for (const char* spelling : {"HYBRID_SHARD_ZERO2", "_HYBRID_SHARD_ZERO2"}) {
    const Config c = load_config_string(fmt::format("fsdp:\n  sharding_strategy: {}\n", spelling), "x",
                                        {"fsdp.shard_group_size=2"});
    EXPECT_EQ(c.fsdp.sharding_strategy, ShardingStrategy::HYBRID_SHARD_ZERO2) << spelling;
    EXPECT_NE(dump_yaml(c).find("  sharding_strategy: HYBRID_SHARD_ZERO2\n"), std::string::npos) << spelling;
    EXPECT_EQ(load_config_string(dump_yaml(c), "dump"), c) << spelling;
  }
  using enum ShardingStrategy;
  EXPECT_TRUE(reshards_after_forward(FULL_SHARD));
  EXPECT_TRUE(reshards_after_forward(HYBRID_SHARD));
  EXPECT_FALSE(reshards_after_forward(SHARD_GRAD_OP));
  EXPECT_FALSE(reshards_after_forward(HYBRID_SHARD_ZERO2));
  EXPECT_FALSE(reshards_after_forward(NO_SHARD));
  EXPECT_TRUE(is_hybrid(HYBRID_SHARD));
  EXPECT_TRUE(is_hybrid(HYBRID_SHARD_ZERO2));
  EXPECT_FALSE(is_hybrid(FULL_SHARD) || is_hybrid(SHARD_GRAD_OP) || is_hybrid(NO_SHARD));
  // Its shard group is HYBRID_SHARD's: fsdp.shard_group_size, 0 for one node's ranks, and a
  // size that does not divide the world is refused naming the key and the strategy.
  const Config by_node = load_config_string("", "x", {"fsdp.sharding_strategy=HYBRID_SHARD_ZERO2"});
  EXPECT_EQ(checked_shard_group(by_node, 8, 4), 4);
  EXPECT_EQ(checked_shard_group(load_config_string("", "x", {"fsdp.sharding_strategy=HYBRID_SHARD_ZERO2",
                                                             "fsdp.shard_group_size=2"}),
                                8, 8),
            2);
  try {
    checked_shard_group(load_config_string("", "configs/x.yaml",
                                           {"fsdp.sharding_strategy=HYBRID_SHARD_ZERO2", "fsdp.shard_group_size=3"}),
                        8, 8);
    ADD_FAILURE() << "a shard group of 3 on 8 ranks was not refused";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--set fsdp.shard_group_size=3: key 'fsdp.shard_group_size' is 3, which does not divide the world size "
              "8: HYBRID_SHARD_ZERO2 shards over groups of that many ranks and replicates across them; use a divisor "
              "of 8, or 0 for the ranks of one node");
  }
}

// ---- A full file ----------------------------------------------------------------------------
TEST(ConfigFile, EveryKeyIsRead) {
  const Config c = load_config(kDataDir + "full.yaml", {});
  EXPECT_EQ(c.run.dir, "/tmp/fsdp-run");
  EXPECT_EQ(c.model.preset, "llama2_7b");
  EXPECT_EQ(c.model.init_from, "/models/Llama-2-7b-hf");
  EXPECT_EQ(c.model.vocab_size, 32000);
  EXPECT_EQ(c.model.hidden_size, 4096);
  EXPECT_EQ(c.model.intermediate_size, 11008);
  EXPECT_EQ(c.model.num_layers, 32);
  EXPECT_EQ(c.model.num_heads, 32);
  EXPECT_EQ(c.model.num_kv_heads, 8);
  EXPECT_EQ(c.model.max_seq_len, 4096);
  EXPECT_EQ(c.model.rope_theta, 10000.0);
  EXPECT_EQ(c.model.norm_eps, 1e-5);
  EXPECT_EQ(c.model.num_experts, 8);
  EXPECT_EQ(c.model.experts_per_token, 2);
  EXPECT_EQ(c.model.router_aux_loss_coef, 0.02);
  EXPECT_EQ(c.model.router_z_loss_coef, 0.001);
  EXPECT_EQ(c.model.router_bias_update_rate, 0.001);
  EXPECT_EQ(c.model.rope_scaling, "llama3");
  EXPECT_EQ(c.model.rope_scaling_factor, 8.0);
  EXPECT_EQ(c.model.rope_low_freq_factor, 1.5);
  EXPECT_EQ(c.model.rope_high_freq_factor, 4.5);
  EXPECT_EQ(c.model.rope_original_max_position_embeddings, 8192);
  EXPECT_EQ(c.model.tie_word_embeddings, true);
  EXPECT_EQ(c.model.init_std, 0.01);
  EXPECT_EQ(c.model.quantization, "nf4");
  EXPECT_TRUE(c.lora.enabled);
  EXPECT_EQ(c.lora.rank, 16);
  EXPECT_EQ(c.lora.alpha, 32.0);
  EXPECT_EQ(c.lora.dropout, 0.05);
  EXPECT_EQ(c.lora.targets, (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj"}));
  EXPECT_TRUE(c.lora.rslora);
  EXPECT_EQ(c.lora.init_from, "/adapters/previous");
  EXPECT_EQ(c.data.source, DataSource::Synthetic);
  EXPECT_EQ(c.data.path, "data/shards/train");
  EXPECT_EQ(c.data.val_path, "data/shards/val");
  EXPECT_EQ(c.data.num_workers, 4);
  EXPECT_EQ(c.data.prefetch, 3);
  EXPECT_EQ(c.data.seed, 7);
  EXPECT_FALSE(c.data.packing);
  EXPECT_TRUE(c.data.document_masking);
  EXPECT_EQ(c.train.max_steps, 5000);
  EXPECT_EQ(c.train.micro_batch_size, 2);
  EXPECT_EQ(c.train.global_batch_size, 64);
  EXPECT_EQ(c.train.grad_accum_steps, 16);
  EXPECT_EQ(c.train.seq_len, 4096);
  EXPECT_EQ(c.train.seed, 1);
  EXPECT_EQ(c.train.log_every, 1);
  EXPECT_EQ(c.train.eval_every, 500);
  EXPECT_EQ(c.train.grad_clip, 0.5);
  EXPECT_EQ(c.train.dtype, DType::BF16);
  EXPECT_EQ(c.train.device, "cuda");
  EXPECT_TRUE(c.train.tf32);
  EXPECT_EQ(c.train.fp16_init_scale, 1024.0);
  EXPECT_EQ(c.train.fp16_growth_interval, 100);
  EXPECT_EQ(c.train.activation_checkpointing, "selective");
  EXPECT_EQ(c.train.activation_checkpointing_every, 2);
  EXPECT_TRUE(c.train.activation_offload);
  EXPECT_EQ(c.train.activation_offload_horizon, 3);
  EXPECT_TRUE(c.train.allow_oversubscribe);
  EXPECT_EQ(c.optim.lr, 1.5e-4);
  EXPECT_EQ(c.optim.min_lr, 0.0);
  EXPECT_EQ(c.optim.warmup_steps, 2000);
  EXPECT_EQ(c.optim.schedule, LrSchedule::Linear);
  EXPECT_EQ(c.optim.weight_decay, 0.0);
  EXPECT_EQ(c.optim.beta1, 0.8);
  EXPECT_EQ(c.optim.beta2, 0.999);
  EXPECT_EQ(c.optim.eps, 1e-6);
  EXPECT_EQ(c.checkpoint.dir, "/ckpt/llama2_7b");
  EXPECT_EQ(c.checkpoint.load_dir, "/ckpt/pretrained");
  EXPECT_EQ(c.checkpoint.interval, 1000);
  EXPECT_EQ(c.checkpoint.keep_last, 2);
  EXPECT_EQ(c.checkpoint.resume, "none");
  EXPECT_TRUE(c.checkpoint.async);
  EXPECT_FALSE(c.checkpoint.stop_on_error);
  EXPECT_EQ(c.parallel.tensor, 2);
  EXPECT_EQ(c.parallel.expert, 2);
  EXPECT_EQ(c.moe.capacity_factor, 1.25);
  EXPECT_EQ(c.fsdp.sharding_strategy, ShardingStrategy::HYBRID_SHARD);
  EXPECT_EQ(c.fsdp.param_dtype, DType::BF16);
  EXPECT_EQ(c.fsdp.reduce_dtype, DType::BF16);
  EXPECT_EQ(c.fsdp.shard_group_size, 8);
  EXPECT_EQ(c.fsdp.prefetch_limit, 1);
  EXPECT_EQ(c.dist.timeout_s, 30.5);
  EXPECT_EQ(c.logging.level, "debug");
  EXPECT_FALSE(c.logging.metrics);
  EXPECT_EQ(c.logging.profile_wait, 10);
  EXPECT_EQ(c.logging.profile_warmup, 2);
  EXPECT_EQ(c.logging.profile_active, 3);
  EXPECT_EQ(c.logging.profile_dir, "/traces/llama2_7b");
  EXPECT_EQ(c.logging.memory_snapshot_step, 12);
  EXPECT_TRUE(c.logging.tensorboard);
  EXPECT_TRUE(c.logging.strict);
  EXPECT_EQ(c.eval.batches, 20);
  EXPECT_EQ(c.eval.split, "train");
}

TEST(ConfigFile, FullFileSetsEveryKeyAwayFromItsDefault) {
  // Guards the file above: a key added to the table must be added there too.
  const std::string loaded = dump_yaml(load_config(kDataDir + "full.yaml"));
  const std::string defaults = dump_yaml(Config{});
  std::set<std::string> default_lines;
  for (size_t p = 0, q; (q = defaults.find('\n', p)) != std::string::npos; p = q + 1)
    default_lines.insert(defaults.substr(p, q - p));
  for (size_t p = 0, q; (q = loaded.find('\n', p)) != std::string::npos; p = q + 1) {
    const std::string line = loaded.substr(p, q - p);
    if (line.starts_with("  ")) {
      EXPECT_FALSE(default_lines.count(line)) << line;
    }
  }
}

TEST(ConfigFile, QuotingDoesNotChangeTheType) {
  const Config c = load_config_string("run:\n  dir: 123\noptim:\n  lr: \"1e-3\"\n", "x");
  EXPECT_EQ(c.run.dir, "123");
  EXPECT_EQ(c.optim.lr, 1e-3);
}

// ---- --set overrides ------------------------------------------------------------------------
TEST(ConfigOverride, EachTypeOfKey) {
  const Config c = load_config_string("", "x",
                                      {"train.max_steps=5", "optim.lr=1e-3", "checkpoint.async=true",
                                       "run.dir=/tmp/x", "optim.schedule=constant", "train.dtype=bfloat16",
                                       "fsdp.sharding_strategy=NO_SHARD", "model.num_layers=2",
                                       "model.rope_theta=500000", "checkpoint.dir="});
  EXPECT_EQ(c.train.max_steps, 5);
  EXPECT_EQ(c.optim.lr, 1e-3);
  EXPECT_TRUE(c.checkpoint.async);
  EXPECT_EQ(c.run.dir, "/tmp/x");
  EXPECT_EQ(c.optim.schedule, LrSchedule::Constant);
  EXPECT_EQ(c.train.dtype, DType::BF16);
  EXPECT_EQ(c.fsdp.sharding_strategy, ShardingStrategy::NO_SHARD);
  EXPECT_EQ(c.model.num_layers, 2);
  EXPECT_EQ(c.model.rope_theta, 500000.0);
  EXPECT_EQ(c.checkpoint.dir, "");
}

TEST(ConfigDist, WatchdogTimeoutFromYamlSetAndItsBounds) {
  EXPECT_EQ(load_config_string("dist:\n  timeout_s: 20\n", "x").dist.timeout_s, 20.0);
  EXPECT_EQ(load_config_string("", "x", {"dist.timeout_s=0"}).dist.timeout_s, 0.0);  // off
  EXPECT_EQ(load_config_string("", "x", {"dist.timeout_s=0.5"}).dist.timeout_s, 0.5);
  EXPECT_EQ(error_of("dist:\n  timeout_s: -1\n"),
            "configs/x.yaml:2: key 'dist.timeout_s' must be between 0 (off) and 1e6 seconds, got -1");
  EXPECT_EQ(error_of("dist:\n  timeout_s: 1e7\n"),
            "configs/x.yaml:2: key 'dist.timeout_s' must be between 0 (off) and 1e6 seconds, got 10000000");
  EXPECT_EQ(error_of("dist:\n  timeout_s: .nan\n"), "configs/x.yaml:2: key 'dist.timeout_s' expects a number, got '.nan'");
  EXPECT_EQ(error_of("dist:\n  timeout: 20\n"),
            "configs/x.yaml:2: unknown key 'dist.timeout' (did you mean 'dist.timeout_s'?)");
}

TEST(ConfigOverride, BeatsTheFileAndLaterBeatsEarlier) {
  const Config c = load_config(kDataDir + "full.yaml",
                               {"train.max_steps=7", "train.max_steps=9", "model.hidden_size=null"});
  EXPECT_EQ(c.train.max_steps, 9);
  EXPECT_FALSE(c.model.hidden_size.has_value());
  EXPECT_EQ(c.train.seq_len, 4096);  // untouched keys keep the file's value
}

TEST(ConfigOverride, CanFixAnImpossibleFileValue) {
  // Validation sees the effective config, so the command line can rescue a bad file.
  EXPECT_EQ(load_config(kDataDir + "bad_value.yaml", {"optim.lr=1e-3"}).optim.lr, 1e-3);
}

// ---- Errors: the whole message, so file:line and key are pinned ---------------------------
TEST(ConfigErrors, UnknownKeySuggestsTheClosestKey) {
  EXPECT_EQ(file_error_of(kDataDir + "unknown_key.yaml"),
            kDataDir + "unknown_key.yaml:7: unknown key 'train.max_step' (did you mean 'train.max_steps'?)");
  EXPECT_EQ(error_of("optim:\n  wieght_decay: 0.1\n"),
            "configs/x.yaml:2: unknown key 'optim.wieght_decay' (did you mean 'optim.weight_decay'?)");
}

TEST(ConfigErrors, UnknownKeyWithoutACloseMatchHasNoSuggestion) {
  EXPECT_EQ(error_of("train:\n  max_steps: 3\n  flux_capacitor: 1\n"),
            "configs/x.yaml:3: unknown key 'train.flux_capacitor'");
}

TEST(ConfigErrors, KeyInTheWrongSectionPointsToItsSection) {
  EXPECT_EQ(error_of("train:\n  lr: 1e-3\n"), "configs/x.yaml:2: unknown key 'train.lr' (did you mean 'optim.lr'?)");
}

TEST(ConfigErrors, UnknownSection) {
  EXPECT_EQ(error_of("run:\n  dir: a\ntrian:\n  max_steps: 3\n"),
            "configs/x.yaml:3: unknown section 'trian' (did you mean 'train'?)");
  const std::string far = error_of("scheduler:\n  x: 1\n");
  EXPECT_TRUE(far.starts_with("configs/x.yaml:1: unknown section 'scheduler' (sections are run, model,")) << far;
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;
}

TEST(ConfigErrors, WrongType) {
  EXPECT_EQ(file_error_of(kDataDir + "bad_type.yaml"),
            kDataDir + "bad_type.yaml:3: key 'train.micro_batch_size' expects an integer, got 'eight'");
  EXPECT_EQ(error_of("train:\n  max_steps: 2.5\n"), "configs/x.yaml:2: key 'train.max_steps' expects an integer, got '2.5'");
  EXPECT_EQ(error_of("optim:\n  lr: fast\n"), "configs/x.yaml:2: key 'optim.lr' expects a number, got 'fast'");
  EXPECT_EQ(error_of("optim:\n  lr: .inf\n"), "configs/x.yaml:2: key 'optim.lr' expects a number, got '.inf'");
  EXPECT_EQ(error_of("checkpoint:\n  async: maybe\n"),
            "configs/x.yaml:2: key 'checkpoint.async' expects true or false, got 'maybe'");
  EXPECT_EQ(error_of("train:\n  seed: 99999999999\n"),
            "configs/x.yaml:2: key 'train.seed' expects an integer, got '99999999999' (out of range)");
  EXPECT_EQ(error_of("train:\n  max_steps:\n"), "configs/x.yaml:2: key 'train.max_steps' expects an integer, got an empty value");
}

TEST(ConfigErrors, MapWhereAScalarBelongsAndViceVersa) {
  EXPECT_EQ(error_of("train:\n  max_steps:\n    value: 3\n"),
            "configs/x.yaml:2: key 'train.max_steps' expects an integer, got a map");
  EXPECT_EQ(error_of("run:\n  dir: [a, b]\n"), "configs/x.yaml:2: key 'run.dir' expects a string, got a list");
  EXPECT_EQ(error_of("run: runs/x\n"), "configs/x.yaml:1: section 'run' expects a map of keys, got 'runs/x'");
  EXPECT_EQ(error_of("- train\n"), "configs/x.yaml:1: expected a map of sections, got a list");
}

TEST(ConfigErrors, ImpossibleValue) {
  EXPECT_EQ(file_error_of(kDataDir + "bad_value.yaml"),
            kDataDir + "bad_value.yaml:5: key 'optim.lr' must be > 0, got -1");
  EXPECT_EQ(error_of("optim:\n  schedule: cosin\n"),
            "configs/x.yaml:2: key 'optim.schedule' must be one of cosine, linear, constant, got 'cosin' (did you mean "
            "'cosine'?)");
  EXPECT_EQ(error_of("train:\n  micro_batch_size: 0\n"), "configs/x.yaml:2: key 'train.micro_batch_size' must be > 0, got 0");
  EXPECT_EQ(error_of("train:\n  grad_accum_steps: 0\n"), "configs/x.yaml:2: key 'train.grad_accum_steps' must be >= 1, got 0");
  EXPECT_EQ(error_of("optim:\n  beta2: 1.0\n"), "configs/x.yaml:2: key 'optim.beta2' must be in [0, 1), got 1");
  EXPECT_EQ(error_of("checkpoint:\n  keep_last: 0\n"), "configs/x.yaml:2: key 'checkpoint.keep_last' must be >= 1, got 0");
  // eval.batches: 0 is the whole split (an SFT split evaluated once, sft_eval), below it nothing.
  EXPECT_EQ(load_config_string("eval:\n  batches: 0\n", "x").eval.batches, 0);
  EXPECT_EQ(error_of("eval:\n  batches: -1\n"), "configs/x.yaml:2: key 'eval.batches' must be >= 0, got -1");
  EXPECT_EQ(error_of("model:\n  norm_eps: 0\n"), "configs/x.yaml:2: key 'model.norm_eps' must be > 0, got 0");
  EXPECT_EQ(error_of("model:\n  preset: llama3_7b\n"),
            "configs/x.yaml:2: key 'model.preset' must be one of tiny, tiny_moe, llama2_7b, llama2_13b, llama2_70b, "
            "codellama_7b, mixtral_8x7b, llama3_8b, llama3_70b, llama3.1_8b, llama3.1_70b, got 'llama3_7b' (did you "
            "mean 'llama2_7b'?)");
  EXPECT_EQ(error_of("model:\n  rope_scaling: yarn\n"),
            "configs/x.yaml:2: key 'model.rope_scaling' must be one of none, linear, llama3, got 'yarn' (dynamic, "
            "yarn, longrope and the other transformers types are not implemented)");
  EXPECT_EQ(error_of("model:\n  rope_scaling_factor: 0.5\n"),
            "configs/x.yaml:2: key 'model.rope_scaling_factor' must be >= 1, got 0.5");
  EXPECT_EQ(error_of("model:\n  tie_word_embeddings: maybe\n"),
            "configs/x.yaml:2: key 'model.tie_word_embeddings' expects true or false, got 'maybe'");
  EXPECT_EQ(error_of("eval:\n  split: data/val\n"),
            "configs/x.yaml:2: key 'eval.split' must be a shard name, not a path, got 'data/val'");
  EXPECT_EQ(error_of("train:\n  dtype: float8\n"),
            "configs/x.yaml:2: key 'train.dtype' must be one of float32, bfloat16, float16, got 'float8' (did you mean "
            "'float32'?)");
  EXPECT_EQ(error_of("train:\n  device: gpu\n"),
            "configs/x.yaml:2: key 'train.device' must be one of auto, cpu, cuda, got 'gpu'");
  EXPECT_EQ(error_of("run:\n  dir: \"\"\n"), "configs/x.yaml:2: key 'run.dir' must not be empty (the run directory)");
}

TEST(ConfigErrors, RulesOverTwoKeysBlameTheOneSetLast) {
  // min_lr is left at its default 3e-5, so the lr line is the one to fix.
  EXPECT_EQ(error_of("optim:\n  lr: 1e-5\n"), "configs/x.yaml:2: key 'optim.lr' must be >= optim.min_lr (3e-05), got 1e-05");
  EXPECT_EQ(error_of("optim:\n  lr: 1e-3\n  min_lr: 1e-2\n"),
            "configs/x.yaml:3: key 'optim.min_lr' must be <= optim.lr (0.001), got 0.01");
  EXPECT_EQ(error_of("model:\n  num_heads: 8\n  num_kv_heads: 3\n"),
            "configs/x.yaml:3: key 'model.num_kv_heads' must divide model.num_heads (8), got 3");
  EXPECT_EQ(error_of("model:\n  hidden_size: 100\n  num_heads: 8\n"),
            "configs/x.yaml:3: key 'model.num_heads' must divide model.hidden_size (100), got 8");
  EXPECT_EQ(error_of("model:\n  num_heads: 8\n", {"model.hidden_size=100"}),
            "--set model.hidden_size=100: key 'model.hidden_size' must be a multiple of model.num_heads (8), got 100");
  EXPECT_EQ(error_of("model:\n  num_heads: 8\n"), "no error");  // divisibility only when both are given
  EXPECT_EQ(error_of("model:\n  num_experts: 4\n  experts_per_token: 5\n"),
            "configs/x.yaml:3: key 'model.experts_per_token' must be in [1, model.num_experts = 4], got 5");
  EXPECT_EQ(error_of("model:\n  experts_per_token: 0\n  num_experts: 4\n"),
            "configs/x.yaml:2: key 'model.experts_per_token' must be in [1, model.num_experts = 4], got 0");
  EXPECT_EQ(error_of("model:\n  experts_per_token: 2\n  num_experts: 1\n"),
            "configs/x.yaml:3: key 'model.num_experts' must be >= model.experts_per_token (2), got 1");
  // data.path is a start-up check (train/setup.cpp): `plan` and the defaults need none.
  EXPECT_EQ(error_of("data:\n  source: shards\n"), "no error");
  EXPECT_EQ(error_of("train:\n  micro_batch_size: 4\n  global_batch_size: 10\n"),
            "configs/x.yaml:3: key 'train.global_batch_size' must be a multiple of train.micro_batch_size (4), got 10");
  EXPECT_EQ(error_of("train:\n  global_batch_size: 12\n", {"train.micro_batch_size=5"}),
            "--set train.micro_batch_size=5: key 'train.micro_batch_size' must divide train.global_batch_size (12), "
            "got 5");
  EXPECT_EQ(error_of("model:\n  quantization: nf4\n"),
            "configs/x.yaml:2: key 'model.quantization' is 'nf4', which needs lora.enabled: true (a quantized base "
            "trains only through adapters)");
  EXPECT_EQ(error_of("lora:\n  enabled: true\nmodel:\n  quantization: nf4\n", {"lora.enabled=false"}),
            "--set lora.enabled=false: key 'lora.enabled' must be true when model.quantization is 'nf4'");
  EXPECT_EQ(error_of("lora:\n  init_from: /a\n"), "configs/x.yaml:2: key 'lora.init_from' needs lora.enabled: true");
}

// train.global_batch_size (issue 31): sequences per optimizer step over all ranks, from
// which the run derives grad_accum_steps (train/setup.h's with_global_batch).
TEST(ConfigTrain, GlobalBatchSizeFromYamlAndSetAndItsBounds) {
  EXPECT_EQ(load_config_string("train:\n  global_batch_size: 32\n", "x").train.global_batch_size, 32);
  EXPECT_EQ(load_config_string("", "x", {"train.global_batch_size=16"}).train.global_batch_size, 16);
  EXPECT_EQ(error_of("train:\n  global_batch_size: -8\n"),
            "configs/x.yaml:2: key 'train.global_batch_size' must be >= 0, got -8");
  EXPECT_EQ(error_of("", {"train.global_batch_size=many"}),
            "--set train.global_batch_size=many: key 'train.global_batch_size' expects an integer, got 'many'");
}

// The logs print [warning]: the level a user copies from them is accepted.
TEST(ConfigLogging, WarningIsALevelAsTheLogSpellsIt) {
  EXPECT_EQ(load_config_string("", "x", {"logging.level=warning"}).logging.level, "warning");
  EXPECT_EQ(load_config_string("logging:\n  level: warn\n", "x").logging.level, "warn");
}

// Values of a closed list get a did-you-mean, as keys do.
TEST(ConfigErrors, ChoicesSuggestTheClosestValue) {
  EXPECT_EQ(error_of("", {"fsdp.sharding_strategy=FULL_SHRD"}),
            "--set fsdp.sharding_strategy=FULL_SHRD: key 'fsdp.sharding_strategy' must be one of FULL_SHARD, "
            "SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2, got 'FULL_SHRD' (did you mean 'FULL_SHARD'?)");
  EXPECT_EQ(error_of("", {"fsdp.sharding_strategy=HYBRID_SHARD_ZER02"}),
            "--set fsdp.sharding_strategy=HYBRID_SHARD_ZER02: key 'fsdp.sharding_strategy' must be one of FULL_SHARD, "
            "SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2, got 'HYBRID_SHARD_ZER02' (did you mean "
            "'HYBRID_SHARD_ZERO2'?)");
  EXPECT_EQ(error_of("", {"logging.level=warnings"}),
            "--set logging.level=warnings: key 'logging.level' must be one of trace, debug, info, warn, warning, "
            "error, got 'warnings' (did you mean 'warning'?)");
  EXPECT_EQ(error_of("", {"train.activation_checkpointing=ful"}),
            "--set train.activation_checkpointing=ful: key 'train.activation_checkpointing' must be one of none, "
            "full, selective, got 'ful' (did you mean 'full'?)");
}

// lora.targets: a YAML list, one name, or names separated by commas (the --set spelling),
// written back as a flow list that reads back equal.
TEST(ConfigLora, TargetsTakeAListOrCommaSeparatedNames) {
  EXPECT_EQ(load_config_string("", "x").lora.targets, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(load_config_string("lora:\n  targets: [q_proj, o_proj]\n", "x").lora.targets,
            (std::vector<std::string>{"q_proj", "o_proj"}));
  EXPECT_EQ(load_config_string("lora:\n  targets:\n    - gate_proj\n    - up_proj\n", "x").lora.targets,
            (std::vector<std::string>{"gate_proj", "up_proj"}));
  EXPECT_EQ(load_config_string("", "x", {"lora.targets=all-linear"}).lora.targets,
            (std::vector<std::string>{"all-linear"}));
  EXPECT_EQ(load_config_string("", "x", {"lora.targets=q_proj, k_proj,v_proj"}).lora.targets,
            (std::vector<std::string>{"q_proj", "k_proj", "v_proj"}));
  const Config c = load_config_string("lora:\n  enabled: true\n  targets: [k_proj]\n", "x");
  EXPECT_NE(dump_yaml(c).find("lora:\n  enabled: true\n  rank: 8\n  alpha: 16.0\n  dropout: 0.0\n  targets: [k_proj]\n"),
            std::string::npos)
      << dump_yaml(c);
  EXPECT_EQ(load_config_string(dump_yaml(c), "dump"), c);
  EXPECT_EQ(error_of("lora:\n  targets: []\n"), "configs/x.yaml:2: key 'lora.targets' must name at least one module");
  EXPECT_EQ(error_of("lora:\n  targets: {a: 1}\n"), "configs/x.yaml:2: key 'lora.targets' expects a list of names, got a map");
  EXPECT_EQ(error_of("lora:\n  rank: 0\n"), "configs/x.yaml:2: key 'lora.rank' must be >= 1, got 0");
  EXPECT_EQ(error_of("lora:\n  dropout: 1\n"), "configs/x.yaml:2: key 'lora.dropout' must be in [0, 1), got 1");
  EXPECT_EQ(error_of("model:\n  quantization: int8\n"),
            "configs/x.yaml:2: key 'model.quantization' must be one of none, nf4, got 'int8'");
}

// The model shape a preset and the model keys resolve to is checked with the config (the
// preset tiny: hidden 128, 4 heads, 2 kv heads, context 512), the key set last blamed:
// these were errors of model construction (exit 1, internal text) before.
TEST(ConfigErrors, TheResolvedModelShapeIsCheckedWithTheConfig) {
  const std::string tiny = " (model.preset tiny with the model keys set)";
  EXPECT_EQ(error_of("model:\n  num_heads: 3\n"),
            "configs/x.yaml:2: key 'model.num_heads': model.hidden_size (128) must be divisible by model.num_heads "
            "(3)" + tiny);
  EXPECT_EQ(error_of("model:\n  num_kv_heads: 3\n"),
            "configs/x.yaml:2: key 'model.num_kv_heads': model.num_heads (4) must be divisible by model.num_kv_heads "
            "(3)" + tiny);
  EXPECT_EQ(error_of("model:\n  hidden_size: 120\n  num_heads: 8\n  num_kv_heads: 4\n"),
            "configs/x.yaml:3: key 'model.num_heads': head dim model.hidden_size / model.num_heads = 120 / 8 = 15 "
            "must be even for rotary embeddings" + tiny);
  EXPECT_EQ(error_of("model:\n  hidden_size: 1000000\n"),
            "configs/x.yaml:2: key 'model.hidden_size': model.hidden_size must be in [1, 262144], got 1000000" + tiny);
  EXPECT_EQ(error_of("train:\n  seq_len: 1024\n"),
            "configs/x.yaml:2: key 'train.seq_len': train.seq_len 1024 exceeds the model's max_seq_len 512" + tiny);
  EXPECT_EQ(error_of("train:\n  seq_len: 256\n", {"model.max_seq_len=128"}),
            "--set model.max_seq_len=128: key 'model.max_seq_len': train.seq_len 256 exceeds the model's max_seq_len "
            "128" + tiny);
  // With a model folder the shape is its config.json's, read at start-up (fail_key then).
  EXPECT_EQ(error_of("model:\n  init_from: /models/x\ntrain:\n  seq_len: 100000\n"), "no error");
}

TEST(ConfigErrors, BoundsOfWhatIsAllocatedAtStart) {
  EXPECT_EQ(error_of("data:\n  prefetch: 1000000000\n"),
            "configs/x.yaml:2: key 'data.prefetch' must be in [0, 1024], got 1000000000");
  EXPECT_EQ(error_of("", {"data.num_workers=100000"}),
            "--set data.num_workers=100000: key 'data.num_workers' must be in [0, 256], got 100000");
}

TEST(ConfigErrors, SixteenBitComputeOnTheCpuDevice) {
  EXPECT_EQ(error_of("train:\n  dtype: bfloat16\n  device: cpu\n"),
            "configs/x.yaml:3: key 'train.device' is cpu, but train.dtype bfloat16 needs a GPU");
  EXPECT_EQ(error_of("train:\n  device: cpu\n", {"train.dtype=float16"}),
            "--set train.dtype=float16: key 'train.dtype' is float16, which needs train.device cuda: the CPU computes "
            "in float32 (fsdp.param_dtype: bfloat16 still halves the all-gathers)");
  EXPECT_EQ(error_of("train:\n  dtype: bfloat16\n"), "no error");  // auto: the GPU is known at start-up
}

// A second document was ignored without a word.
TEST(ConfigErrors, ASecondYamlDocumentIsRefused) {
  EXPECT_EQ(error_of("train:\n  max_steps: 5\n---\ntrain:\n  max_steps: 7\n"),
            "configs/x.yaml:4: a second YAML document (after '---'): a config is one document; merge the two, or put "
            "the second in a file of its own");
  EXPECT_EQ(error_of("---\ntrain:\n  max_steps: 5\n"), "no error");
  EXPECT_EQ(error_of("train:\n  max_steps: 5\n---\n"), "no error");  // a trailing '---' holds nothing
  EXPECT_EQ(error_of("# a comment\n---\ntrain:\n  max_steps: 5\n--- \n# only a comment\n"), "no error");
  EXPECT_EQ(error_of("train:\n  max_steps: 5\n...\ntrain:\n  max_steps: 7\n").substr(0, 17), "configs/x.yaml:4:");
  EXPECT_EQ(error_of("--- {train: {max_steps: 5}}\n--- {train: {max_steps: 6}}\n").substr(0, 17), "configs/x.yaml:2:");
  // Not markers: indented, or followed by other characters.
  EXPECT_EQ(error_of("run:\n  dir: \"a\n  --- b\"\ntrain:\n  max_steps: 5\n"), "no error");
}

// Errors found after loading (the GPU a rank sees, a model folder's context) still name
// where the key was set.
TEST(ConfigErrors, OriginsAreKeptForErrorsFoundLater) {
  const Config c = load_config_string("train:\n  max_steps: 5\n  device: cuda\n", "configs/x.yaml",
                                      {"train.seq_len=64"});
  auto message = [&](std::string_view key) {
    try {
      fail_key(c, key, "is wrong here");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("train.device"), "configs/x.yaml:3: key 'train.device' is wrong here");
  EXPECT_EQ(message("train.seq_len"), "--set train.seq_len=64: key 'train.seq_len' is wrong here");
  EXPECT_EQ(message("train.dtype"), "configs/x.yaml: key 'train.dtype' is wrong here");
  EXPECT_EQ(c, load_config_string("train:\n  device: cuda\n  max_steps: 5\n  seq_len: 64\n", "y.yaml"));
}

TEST(ConfigErrors, ActivationCheckpointingAndOffloadRules) {
  EXPECT_EQ(error_of("train:\n  activation_checkpointing_every: 0\n"),
            "configs/x.yaml:2: key 'train.activation_checkpointing_every' must be >= 1, got 0");
  EXPECT_EQ(error_of("train:\n  activation_checkpointing_every: -2\n"),
            "configs/x.yaml:2: key 'train.activation_checkpointing_every' must be >= 1, got -2");
  EXPECT_EQ(error_of("train:\n  activation_checkpointing: partial\n"),
            "configs/x.yaml:2: key 'train.activation_checkpointing' must be one of none, full, selective, got 'partial'");
  // Above the layer count: the preset's (tiny has 4), or an override's, set before or after.
  EXPECT_EQ(error_of("train:\n  activation_checkpointing_every: 5\n"),
            "configs/x.yaml:2: key 'train.activation_checkpointing_every' must be at most the model's 4 layers, got 5");
  EXPECT_EQ(error_of("train:\n  activation_checkpointing_every: 3\n", {"model.num_layers=2"}),
            "--set model.num_layers=2: key 'model.num_layers' must be at least train.activation_checkpointing_every "
            "(3), got 2");
  EXPECT_EQ(error_of("model:\n  preset: llama2_7b\ntrain:\n  activation_checkpointing_every: 32\n"), "no error");
  EXPECT_EQ(error_of("train:\n  activation_offload: true\n"),
            "configs/x.yaml:2: key 'train.activation_offload' is true, which needs train.activation_checkpointing "
            "full or selective (offloading moves what a checkpointed block keeps), got none");
  EXPECT_EQ(error_of("train:\n  activation_offload: true\n", {"train.activation_checkpointing=none"}),
            "--set train.activation_checkpointing=none: key 'train.activation_checkpointing' is none, but "
            "train.activation_offload is true: offloading moves what a checkpointed block keeps; set full or "
            "selective, or train.activation_offload: false");
  EXPECT_EQ(error_of("train:\n  activation_offload: true\n  activation_checkpointing: selective\n"), "no error");
  EXPECT_EQ(error_of("train:\n  activation_offload_horizon: 0\n"),
            "configs/x.yaml:2: key 'train.activation_offload_horizon' must be >= 1, got 0");
}

TEST(ConfigErrors, ValidateOnAConfigBuiltInCode) {
  Config c;
  c.optim.lr = -1;
  try {
    validate(c);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "config: key 'optim.lr' must be > 0, got -1");
  }
}

TEST(ConfigErrors, BadOverride) {
  EXPECT_EQ(error_of("", {"train.max_steps=abc"}),
            "--set train.max_steps=abc: key 'train.max_steps' expects an integer, got 'abc'");
  EXPECT_EQ(error_of("", {"foo"}), "--set foo: expected section.key=value, e.g. --set train.max_steps=5");
  EXPECT_EQ(error_of("", {"max_steps=5"}),
            "--set max_steps=5: 'max_steps' is not of the form section.key, e.g. --set train.max_steps=5");
  EXPECT_EQ(error_of("", {"train.max_step=5"}),
            "--set train.max_step=5: unknown key 'train.max_step' (did you mean 'train.max_steps'?)");
  EXPECT_EQ(error_of("", {"trainn.max_steps=5"}),
            "--set trainn.max_steps=5: unknown section 'trainn' (did you mean 'train'?)");
  EXPECT_EQ(error_of("", {"optim.lr=0"}), "--set optim.lr=0: key 'optim.lr' must be > 0, got 0");
  const std::string bad_yaml = error_of("", {"run.dir=[oops"});
  EXPECT_TRUE(bad_yaml.starts_with("--set run.dir=[oops: key 'run.dir': the value is not valid YAML (")) << bad_yaml;
}

TEST(ConfigErrors, MissingFileAndSyntaxError) {
  const std::string missing = kDataDir + "no_such_file.yaml";
  EXPECT_EQ(file_error_of(missing), missing + ": cannot open config file: No such file or directory");
  EXPECT_EQ(file_error_of(kDataDir), kDataDir + ": cannot open config file: it is a directory, not a regular file");
  // Once a FIFO blocked here until something wrote to it, and /dev/zero was read forever.
  EXPECT_EQ(file_error_of("/dev/zero"),
            "/dev/zero: cannot open config file: it is a character device, not a regular file");
  const std::string syntax = file_error_of(kDataDir + "syntax_error.yaml");
  EXPECT_TRUE(syntax.starts_with(kDataDir + "syntax_error.yaml:4: invalid YAML: ")) << syntax;
}

TEST(ConfigErrors, DuplicateKeysAndSections) {
  EXPECT_EQ(file_error_of(kDataDir + "duplicate_key.yaml"),
            kDataDir + "duplicate_key.yaml:5: duplicate key 'train.max_steps' (first at line 3)");
  EXPECT_EQ(error_of("train:\n  max_steps: 1\noptim:\n  lr: 1e-3\ntrain:\n  seq_len: 8\n"),
            "configs/x.yaml:5: duplicate section 'train' (first at line 1)");
}

// ---- dump_yaml, hash, describe_keys ----------------------------------------------------------
TEST(ConfigDump, RoundTripsToAnEqualConfig) {
  const Config defaults;
  EXPECT_EQ(load_config_string(dump_yaml(defaults), "dump"), defaults);
  // Strings YAML would otherwise read as null, a map or a comment, and doubles that need
  // every digit.
  const Config full = load_config(kDataDir + "full.yaml",
                                  {"run.dir=\"null\"", "model.init_from='a: b # c'", "checkpoint.resume=\"~\"",
                                   "optim.lr=0.1", "optim.min_lr=0.030000000000000002", "model.norm_eps=1e-300"});
  EXPECT_EQ(full.run.dir, "null");
  EXPECT_EQ(full.model.init_from, "a: b # c");
  EXPECT_EQ(load_config_string(dump_yaml(full), "dump"), full);
}

TEST(ConfigDump, EveryKeyInSectionOrder) {
  const std::string text = dump_yaml(Config{});
  EXPECT_TRUE(text.starts_with("run:\n  dir: runs/default\nmodel:\n  preset: tiny\n  init_from: \"\"\n"
                               "  vocab_size: null\n"))
      << text;
  size_t last = 0;
  for (const char* section : {"\nmodel:", "\nlora:", "\ndata:", "\ntrain:", "\noptim:", "\ncheckpoint:", "\nfsdp:",
                              "\ndist:", "\nlogging:", "\neval:"}) {
    const size_t at = text.find(section);
    ASSERT_NE(at, std::string::npos) << section;
    EXPECT_GT(at, last) << section;
    last = at;
  }
  EXPECT_NE(text.find("  rope_theta: null\n"), std::string::npos);
  EXPECT_NE(text.find("  init_std: 0.02\n"), std::string::npos);
  EXPECT_NE(text.find("  grad_clip: 1.0\n"), std::string::npos);
  EXPECT_NE(text.find("  sharding_strategy: FULL_SHARD\n"), std::string::npos);
  EXPECT_NE(text.find("  dtype: float32\n"), std::string::npos);
  const size_t lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
  EXPECT_EQ(lines, 13 + 95u);  // 13 sections, 95 keys
}

TEST(ConfigDump, HashIsDeterministicAndSeesEveryChange) {
  const Config a;
  EXPECT_EQ(config_hash(a), config_hash(Config{}));
  Config b = a;
  b.optim.lr = 3.0001e-4;
  EXPECT_NE(config_hash(a), config_hash(b));
  b = a;
  b.model.num_layers = 2;
  EXPECT_NE(config_hash(a), config_hash(b));
  b = a;
  b.checkpoint.async = true;
  EXPECT_NE(config_hash(a), config_hash(b));
  EXPECT_EQ(config_hash(load_config_string(dump_yaml(a), "x")), config_hash(a));
}

TEST(ConfigDump, DescribeKeysListsTypeDefaultAndDoc) {
  const std::string help = describe_keys();
  EXPECT_NE(help.find("  train.max_steps = 100  (integer)\n      Optimizer steps to run.\n"), std::string::npos) << help;
  EXPECT_NE(help.find("  optim.schedule = cosine  (cosine | linear | constant)\n"), std::string::npos);
  EXPECT_NE(help.find("  model.hidden_size = null  (integer or null)\n"), std::string::npos);
  EXPECT_NE(help.find("  model.preset = tiny  (tiny | tiny_moe | llama2_7b | llama2_13b | llama2_70b | codellama_7b | "
                      "mixtral_8x7b | llama3_8b | llama3_70b | llama3.1_8b | llama3.1_70b)\n"),
            std::string::npos);
  EXPECT_NE(help.find("  model.rope_scaling = null  (string or null)\n"), std::string::npos);
  EXPECT_NE(help.find("  eval.split = val  (string)\n"), std::string::npos);
  for (const detail::Field& f : detail::fields()) {
    EXPECT_NE(help.find(fmt::format("  {}.{} = ", f.section, f.key)), std::string::npos) << f.key;
    EXPECT_FALSE(f.doc.empty()) << f.key;
  }
  // Doc lines wrap at 100 columns (issue 31: up to 308); only a key's own line, which names
  // a long list of choices, may be longer.
  for (size_t p = 0, q; (q = help.find('\n', p)) != std::string::npos; p = q + 1)
    if (help.compare(p, 6, "      ") == 0) EXPECT_LE(q - p, 100u) << help.substr(p, q - p);
}

}  // namespace
}  // namespace fsdp::config
