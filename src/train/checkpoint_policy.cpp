// The trainer's checkpointing: when to save, what a save holds, how a failure is handled,
// and where a run resumes from; see checkpoint_policy.h.
#include "fsdp/train/checkpoint_policy.h"

#include <algorithm>

#include <chrono>
#include <filesystem>
#include <utility>

#include <spdlog/spdlog.h>

#include "fsdp/ckpt/checkpoint_reader.h"
#include "fsdp/train/base_model.h"
#include "fsdp/train/resume_changes.h"
#include "fsdp/train/run_ownership.h"

namespace fsdp::train {

CheckpointPolicy::CheckpointPolicy(const config::Config& cfg, dist::ProcessGroups& groups)
    : cfg_(cfg),
      groups_(groups),
      writer_(std::make_unique<ckpt::CheckpointWriter>(
          groups, ckpt::WriterOptions{config::checkpoint_dir(cfg), cfg.checkpoint.keep_last, cfg.checkpoint.async})) {}

// checkpoint.resume's choice. auto looks in checkpoint.dir first, where a requeued run's
// own progress is, and only then in checkpoint.load_dir (where a fine-tune starts from):
// a run that resumed from load_dir and was requeued must continue its own work, not start
// over from load_dir. A load_dir or resume path that is not there is an error, never a
// silent start from step 0.
std::string CheckpointPolicy::resume_point() {
  const std::string& r = cfg_.checkpoint.resume;
  if (r == "none") return "";
  std::error_code ec;
  if (r != "auto") {
    // A path that is not there, or is no checkpoint, is the config's error: nothing ran.
    if (!std::filesystem::exists(r, ec)) config::fail_key(cfg_, "checkpoint.resume", fmt::format("is {}, which does not exist", r));
    if (!ckpt::is_checkpoint_dir(r)) {
      config::fail_key(cfg_, "checkpoint.resume",
                       fmt::format("is {}, which is not an fsdp_train checkpoint (no {}/manifest.json)", r, r));
    }
    ckpt::verify_checkpoint(r, *groups_.world);
    return r;
  }
  const std::string own = config::checkpoint_dir(cfg_);
  std::string found = ckpt::find_latest_checkpoint(own, *groups_.world);
  const std::string& load = cfg_.checkpoint.load_dir;
  if (found.empty() && !load.empty()) {
    if (!std::filesystem::is_directory(load, ec))
      config::fail_key(cfg_, "checkpoint.load_dir", fmt::format("is {}, which does not exist (or is not a directory)", load));
    found = ckpt::find_latest_checkpoint(load, *groups_.world);
    FSDP_CHECK(!found.empty(), "checkpoint.load_dir {} holds no complete checkpoint to start from (step_<N>/ with a "
               "manifest.json that verifies)", load);
  }
  if (found.empty() && training_) spdlog::info("checkpoint: none in {}: starting from step 0", own);
  return found;
}

std::string CheckpointPolicy::start(bool claims_dir) {
  training_ = claims_dir;
  const std::string path = resume_point();
  const std::string resumed_id = path.empty() ? "" : ckpt::CheckpointReader(path).manifest().run_id;
  run_id_ = claims_dir ? claim_checkpoint_dir(cfg_, *groups_.world, path, resumed_id) : resumed_id;
  if (claims_dir && groups_.world->rank() == 0) {
    spdlog::info("run id {}{}", run_id_,
                 path.empty() ? " (a fresh run)" : resumed_id.empty() ? " (new: the checkpoint has none)" : " (resumed)");
  }
  return path;
}

ckpt::TrainState CheckpointPolicy::restore(const std::string& path, const model::Llama& model, FsdpEngine& engine) {
  const auto t0 = std::chrono::steady_clock::now();
  const ckpt::CheckpointReader reader(path);
  reader.check_model(model.config(), model.units());
  const ckpt::Manifest& m = reader.manifest();
  // The units matched, so both or neither are LoRA runs; the base must be the same one,
  // and the adapters must mean what they meant: the rank is in the units' sizes, the scale
  // (lora.alpha, lora.rslora) only in the config the checkpoint recorded.
  if (m.base && base_) check_same_base(*m.base, *base_, path);
  if (m.base && cfg_.lora.enabled) check_same_lora_scale(m.config_yaml, path);
  uint64_t bytes = 0;
  Tensor staging;  // shards on a GPU are read into host memory, then uploaded
  for (int u = 0; u < engine.num_units(); ++u) {
    const int64_t begin = engine.shard_range(u).begin;
    for (const auto& [kind, dst] : {std::pair<const char*, const Tensor&>{"master", engine.master(u)},
                                    {"exp_avg", engine.exp_avg(u)}, {"exp_avg_sq", engine.exp_avg_sq(u)}}) {
      // In this run's layout of the unit, whatever the saving run's (tensor degree, shards).
      const model::UnitLayout& layout = model.units()[size_t(u)];
      if (dst.device().is_cpu()) {
        reader.read(layout, u, kind, begin, dst);
      } else {
        if (!staging.defined() || staging.numel() < dst.numel()) staging = Tensor::empty({dst.numel()}, DType::F32);
        const Tensor host = staging.narrow(0, 0, dst.numel());
        reader.read(layout, u, kind, begin, host);
        dst.copy_(host);
      }
      bytes += dst.nbytes();
    }
  }
  last_saved_step_ = m.state.step;
  last_committed_step_ = m.state.step;
  resumed_from_ = path;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("checkpoint: resumed from {} at step {} ({} tokens seen; saved by {} rank(s) with {}{}); loaded {:.1f} "
               "MiB on this rank in {:.2f} s",
               path, m.state.step, m.state.tokens_seen, m.world_size, m.strategy,
               m.tensor_parallel > 1 ? fmt::format(", tensor parallel {}", m.tensor_parallel) : std::string(),
               double(bytes) / (1 << 20), secs);
  if (m.state.data_seed != uint64_t(cfg_.data.seed)) {
    spdlog::warn("checkpoint: data.seed {} differs from the checkpoint's {}: the data order from here on is not the "
                 "original run's",
                 cfg_.data.seed, m.state.data_seed);
  }
  // Only a training run continues the checkpoint's run (eval reads the weights).
  if (training_ && groups_.world->rank() == 0) warn_changes(m, path);
  if (training_ && m.state.step >= cfg_.train.max_steps) {
    spdlog::warn("checkpoint: {} is at step {}, train.max_steps is {}: nothing to train (raise train.max_steps to "
                 "train on; to start over, set checkpoint.resume: none and checkpoint.overwrite: true, which moves "
                 "the old checkpoints aside; or give this run its own run.dir)",
                 path, m.state.step, cfg_.train.max_steps);
  }
  return m.state;
}

// A LoRA adapter's update is scale x B A with scale = alpha / r (alpha / sqrt(r) under
// rslora): continuing a checkpoint with another alpha or rslora would scale every trained
// adapter differently from the step it was saved at. A changed rank is refused by the
// units' sizes (check_model); these two the same way, by name. The config is what must
// change, before the first step: a ConfigError (exit 2, docs/checkpoints-and-resume.md#exit-codes).
void CheckpointPolicy::check_same_lora_scale(const std::string& saved_yaml, const std::string& path) const {
  config::Config saved;
  try {
    saved = config::load_config_string(saved_yaml, path + "/manifest.json: config");
  } catch (const std::exception&) {
    return;  // a config this build cannot read (an older schema): nothing to compare against
  }
  const auto& was = saved.lora;
  const auto& now = cfg_.lora;
  if (was.alpha != now.alpha) {
    throw config::ConfigError(fmt::format(
        "checkpoint {} was trained with lora.alpha {}, but this run has lora.alpha {}: its adapters would be scaled "
        "differently (by alpha / {}); set lora.alpha: {} to continue it, or start another run in another run.dir",
        path, was.alpha, now.alpha, now.rslora ? "sqrt(r)" : "r", was.alpha));
  }
  if (was.rslora != now.rslora) {
    throw config::ConfigError(fmt::format(
        "checkpoint {} was trained with lora.rslora {}, but this run has lora.rslora {}: its adapters would be scaled "
        "by alpha / {} instead of alpha / {}; set lora.rslora: {} to continue it, or start another run in another "
        "run.dir",
        path, was.rslora, now.rslora, now.rslora ? "sqrt(r)" : "r", was.rslora ? "sqrt(r)" : "r", was.rslora));
  }
}

void CheckpointPolicy::warn_changes(const ckpt::Manifest& m, const std::string& path) const {
  config::Config saved;
  try {
    saved = config::load_config_string(m.config_yaml, path + "/manifest.json");
  } catch (const Error& e) {
    // A checkpoint of an older fsdp_train whose config no longer loads: nothing to compare.
    spdlog::debug("checkpoint: the config stored in {} does not load ({}): resume changes not checked", path,
                  e.what());
    return;
  }
  // The global batch counts data-parallel ranks: a tensor group reads one micro-batch.
  const int saved_data_ranks = m.world_size / std::max(m.tensor_parallel, 1);
  for (const std::string& line :
       resume_changes(saved, saved_data_ranks, cfg_, groups_.mesh.data_parallel_size(), m.state.step))
    spdlog::warn("checkpoint: {}", line);
}

template <typename F>
bool CheckpointPolicy::guarded(F&& f) {
  try {
    f();
    return true;
  } catch (const Error& e) {
    if (cfg_.checkpoint.stop_on_error) throw;
    spdlog::error("{} (checkpoint.stop_on_error is false: training goes on)", e.what());
    return false;
  }
}

ckpt::SaveStats CheckpointPolicy::save(const ckpt::TrainState& state, const model::Llama& model, FsdpEngine& engine) {
  ckpt::CheckpointMeta meta;
  meta.state = state;
  meta.model = model.config();
  meta.units = model.units();
  meta.strategy = std::string(config::to_string(cfg_.fsdp.sharding_strategy));
  meta.shard_group_size = groups_.shard->size();
  meta.config_yaml = config::dump_yaml(cfg_);
  meta.run_id = run_id_;
  meta.base = base_;
  std::vector<ckpt::UnitShard> shards(size_t(engine.num_units()));
  for (int u = 0; u < engine.num_units(); ++u) {
    shards[size_t(u)] = ckpt::UnitShard{engine.shard_range(u).begin, engine.master(u), engine.exp_avg(u),
                                        engine.exp_avg_sq(u)};
  }
  // A background save still pending commits first, here rather than inside the writer's
  // save(), so that its commit is logged and counted like any other.
  finish();
  last_saved_step_ = state.step;
  ckpt::SaveStats s;
  if (guarded([&] { s = writer_->save(meta, shards); })) log_save(s, !cfg_.checkpoint.async);
  return s;
}

bool CheckpointPolicy::due(int64_t step) const {
  const int interval = cfg_.checkpoint.interval;
  return interval > 0 && step % interval == 0 && step < cfg_.train.max_steps;
}

void CheckpointPolicy::commit_ready(int busy_writers) {
  if (!writer_->pending() || busy_writers != 0) return;
  guarded([&] { log_save(writer_->commit(), true); });
}

// The commit that finish() makes is a commit like commit_ready()'s: it is logged and it
// moves last_committed_step_. (It once did neither, so every run with checkpoint.async
// ended by reporting its final, committed checkpoint as not on disk, and exited 1.)
void CheckpointPolicy::finish() {
  if (!writer_->pending()) return;
  guarded([&] {
    if (const std::optional<ckpt::SaveStats> s = writer_->finish()) log_save(*s, true);
  });
}

void CheckpointPolicy::log_save(const ckpt::SaveStats& s, bool committed) {
  if (committed) last_committed_step_ = s.step;
  if (!committed) {
    spdlog::info("checkpoint: step {} snapshot taken, the step loop stalled {:.0f} ms; writing in the background",
                 s.step, s.stall_seconds * 1e3);
    return;
  }
  const double gbps = s.write_seconds > 0 ? double(s.bytes) / s.write_seconds / 1e9 : 0.0;
  if (cfg_.checkpoint.async) {
    spdlog::info("checkpoint: saved {} ({:.1f} MiB written by this rank in {:.2f} s in the background, {:.2f} GB/s)",
                 s.path, double(s.bytes) / (1 << 20), s.write_seconds, gbps);
  } else {
    spdlog::info("checkpoint: saved {} ({:.1f} MiB written by this rank in {:.2f} s, {:.2f} GB/s; the step loop "
                 "stalled {:.0f} ms)",
                 s.path, double(s.bytes) / (1 << 20), s.write_seconds, gbps, s.stall_seconds * 1e3);
  }
}

}  // namespace fsdp::train
