// The training step and the run loop; see trainer.h (what a run logs as it starts:
// run_start_report.cpp).
#include "fsdp/train/trainer.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <tuple>

#include <spdlog/spdlog.h>

#include "fsdp/config/model_options.h"
#include "fsdp/core/memory_category.h"
#include "fsdp/core/trace.h"
#include "fsdp/dist/watchdog.h"
#include "fsdp/obs/device_peak.h"
#include "fsdp/obs/observability.h"
#include "fsdp/ops/cross_entropy.h"
#include "fsdp/plan/memory_check.h"
#include "fsdp/train/base_model.h"
#include "fsdp/train/divergence.h"
#include "fsdp/train/exit_codes.h"
#include "fsdp/train/preemption.h"
#if defined(FSDP_WITH_CUDA)
#include "fsdp/core/cuda.h"
#endif

namespace fsdp::train {

namespace {

uint64_t max_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return uint64_t(ru.ru_maxrss) * 1024;
}

}  // namespace

Trainer::Trainer(const config::Config& cfg, dist::ProcessGroups& groups, TrainerPurpose purpose)
    : Trainer(Effective{}, with_global_batch(cfg, groups.mesh.data_parallel_size()), groups, purpose) {}

Trainer::Trainer(Effective, const config::Config& cfg, dist::ProcessGroups& groups, TrainerPurpose purpose)
    : cfg_(cfg),
      groups_(groups),
      device_(resolve_device(cfg, groups.world_info)),
      memory_plan_(plan::check_memory(cfg, groups.world_info, device_)),
      engine_groups_(engine_groups(groups, device_)),
      tensor_group_(*engine_groups_.tensor),
      expert_group_(engine_groups_.expert != nullptr ? std::make_unique<CommExpertGroup>(*engine_groups_.expert)
                                                     : nullptr),
      model_(runs_on(rank_model_config(cfg, groups), cfg, device_), cfg.train.dtype, device_,
             config::peft_spec(cfg, config::training_model_config(cfg)), uint64_t(cfg.train.seed), &tensor_group_,
             expert_group_.get()),
      engine_(model_.units(), engine_groups_, config::fsdp_options(cfg, device_)),
      act_(model_.config(), cfg.train.micro_batch_size, cfg.train.seq_len, cfg.train.dtype, device_,
           config::activation_checkpointing(cfg.train)),
      count_buf_(Tensor::zeros({1}, DType::F64)),
      schedule_(lr_schedule(cfg)),
      adamw_(adamw_config(cfg)),
      checkpoints_(cfg, groups),
      votes_buf_(Tensor::zeros({StepVotes::kSlots}, DType::F64)),
      flops_per_token_(model_.config().train_flops_per_token(cfg.train.seq_len)) {
  if (cfg.train.dtype == DType::F16) scaler_ = optim::DynamicLossScaler(cfg.train.fp16_init_scale, cfg.train.fp16_growth_interval);
  if (model_.config().is_moe())
    expert_load_.emplace(model_.config().num_layers, model_.config().num_experts, model_.config().capacity_factor > 0);
#if defined(FSDP_WITH_CUDA)
  if (device_.is_cuda()) {
    cuda::set_tf32(cfg.train.tf32);
    // One staging row per micro-batch of a step (Trainer::load_micro_batch), and the step's
    // per-token losses gathered on the device for one read-back.
    const int64_t n = int64_t(cfg.train.micro_batch_size) * cfg.train.seq_len, accum = cfg.train.grad_accum_steps;
    const memory::CategoryScope tag("batch/staging");
    ids_host_ = cuda::pinned_empty({accum, n}, DType::I32);
    targets_host_ = cuda::pinned_empty({accum, n}, DType::I32);
    doc_start_host_ = cuda::pinned_empty({accum, n}, DType::I32);
    step_losses_ = Tensor::empty({accum, n}, act_.losses.dtype(), device_);
    peak_flops_ = obs::peak_bf16_flops(cuda::device_name(device_.index));
  }
#endif
  if (device_.is_cpu()) {
    const int64_t n = int64_t(cfg.train.micro_batch_size) * cfg.train.seq_len, accum = cfg.train.grad_accum_steps;
    const memory::CategoryScope tag("batch/staging");
    ids_host_ = Tensor::empty({accum, n}, DType::I32);
    targets_host_ = Tensor::empty({accum, n}, DType::I32);
    doc_start_host_ = Tensor::empty({accum, n}, DType::I32);
  }
  data_ = make_data_sources(cfg, model_.config().vocab_size, groups);
  // A LoRA run's frozen base is never in a checkpoint: it loads from its source every
  // time, and a checkpoint records which one it was (a resume on another base is refused).
  if (cfg.lora.enabled) {
    init_frozen_base(cfg, model_, engine_);
    checkpoints_.set_base(base_reference(cfg, model_, engine_, *groups.shard, *groups.tensor));
  }
  // Each rank fills only its own shards: from a checkpoint, the files or the seeded generator.
  if (const std::string path = checkpoints_.start(purpose == TrainerPurpose::Train); !path.empty()) {
    restore(path);
  } else if (cfg.lora.enabled) {
    init_adapters(cfg, model_, engine_);
  } else {
    init_parameters(cfg, model_.config(), model_.units(), engine_);
  }
  // Auxiliary-loss-free balancing starts from zero biases, unless the checkpoint brought
  // its own (restore); a checkpoint's biases are routed with even when the rate is 0.
  if (model::RouterBias* bias = model_.router_bias(); bias != nullptr && cfg.model.router_bias_update_rate > 0 && !bias->enabled())
    bias->enable();
}

ckpt::TrainState Trainer::train_state() const {
  ckpt::TrainState s;
  s.step = step_;
  s.tokens_seen = tokens_seen_;
  s.samples_seen = samples_seen_;
  s.train_seed = uint64_t(cfg_.train.seed);
  s.data_seed = uint64_t(cfg_.data.seed);
  if (scaler_.enabled()) {
    s.loss_scale = scaler_.scale();
    s.loss_scale_good_steps = scaler_.good_steps();
    s.skipped_steps = scaler_.skipped_steps();
  }
  if (const model::RouterBias* bias = model_.router_bias()) s.router_bias = bias->values();
  return s;
}

void Trainer::restore(const std::string& path) {
  const ckpt::TrainState s = checkpoints_.restore(path, model_, engine_);
  scaler_.restore(s.loss_scale, s.loss_scale_good_steps, s.skipped_steps);
  if (!s.router_bias.empty()) model_.router_bias()->set(s.router_bias);
  step_ = s.step;
  tokens_seen_ = s.tokens_seen;
  samples_seen_ = s.samples_seen;
  data_.train_loader->seek_global(samples_seen_);
}

ckpt::SaveStats Trainer::save_checkpoint() {
  // A checkpoint is never written from diverged weights (resume would only diverge again).
  if (!weights_finite(engine_, *groups_.world)) {
    throw Diverged(fmt::format("the weights are not finite after step {} (its update overflowed)", step_), step_,
                   step_);
  }
  return checkpoints_.save(train_state(), model_, engine_);
}

void Trainer::finish_checkpoint() { checkpoints_.finish(); }

uint64_t Trainer::comm_bytes() const {
  // The engine's shard and replicate groups carry the FSDP traffic (and its expert-shard
  // group the expert units'), the tensor group the model's tensor-parallel collectives, the
  // expert group the tokens' all-to-alls; world carries the loss.
  uint64_t b = groups_.world->stats().bytes_sent + engine_groups_.shard->stats().bytes_sent +
               engine_groups_.replicate->stats().bytes_sent + engine_groups_.tensor->stats().bytes_sent;
  for (const dist::Communicator* c : expert_comms()) b += c->stats().bytes_sent;
  return b;
}

double Trainer::comm_wait_seconds() const {
  double w = groups_.world->stats().wait_seconds + engine_groups_.shard->stats().wait_seconds +
             engine_groups_.replicate->stats().wait_seconds + engine_groups_.tensor->stats().wait_seconds;
  for (const dist::Communicator* c : expert_comms()) w += c->stats().wait_seconds;
  return w;
}

// The expert-parallel groups, when there are any of more than one rank (a one-rank group
// sends nothing; without expert parallelism expert_shard is the shard group's twin, idle).
std::vector<const dist::Communicator*> Trainer::expert_comms() const {
  std::vector<const dist::Communicator*> out;
  if (groups_.mesh.shape().expert == 1) return out;
  for (const auto& c : {engine_groups_.expert, engine_groups_.expert_shard})
    if (c != nullptr) out.push_back(c.get());
  return out;
}

// Micro-batch `index` of a step goes through staging row `index`: the upload from it is
// only enqueued here, and the row is refilled one step later, after that step's loss
// read-back has waited for the compute stream (which carries the upload). Evaluation uses
// row 0 and reads its losses back at once. On the CPU the loader writes the activations'
// inputs directly. Rows from `keep_rows` on (when >= 0) have their targets masked before
// the upload: the end of a split evaluated whole.
void Trainer::load_micro_batch(data::Loader& loader, int64_t index, int64_t keep_rows) {
  act_.documents = loader.documents();
  const bool cpu = device_.is_cpu();
  const Tensor targets = cpu ? act_.targets : targets_host_.select(0, index);
  const Tensor docs = !act_.documents ? Tensor()
                      : cpu           ? act_.doc_start.reshape({act_.doc_start.numel()})
                                      : doc_start_host_.select(0, index);
  {
    const trace::Span span("data wait", "data");
    loader.next(cpu ? act_.ids : ids_host_.select(0, index), targets, docs);
  }
  if (keep_rows >= 0) {
    int32_t* t = targets.data<int32_t>();
    std::fill(t + keep_rows * cfg_.train.seq_len, t + targets.numel(), data::kIgnoredTarget);
  }
  if (!cpu) upload_micro_batch(index);
}

static_assert(data::kIgnoredTarget == kIgnoreIndex, "the loader's masked target must be what the loss ignores");

int64_t Trainer::stage_step_batches() {
  const int64_t accum = cfg_.train.grad_accum_steps;
  data::Loader& loader = *data_.train_loader;
  {
    const trace::Span span("data wait", "data");
    for (int64_t a = 0; a < accum; ++a)
      loader.next(ids_host_.select(0, a), targets_host_.select(0, a),
                  loader.documents() ? doc_start_host_.select(0, a) : Tensor());
  }
  act_.documents = loader.documents();
  // The ranks of a tensor group stage the same micro-batches: count each data-parallel
  // rank's once.
  const int64_t data_ranks = groups_.mesh.data_parallel_size(), tensor = groups_.mesh.shape().tensor;
  if (!loader.masked()) return targets_host_.numel() * data_ranks;  // every target trains
  int64_t local = 0;
  const int32_t* t = targets_host_.data<int32_t>();
  for (int64_t i = 0; i < targets_host_.numel(); ++i) local += t[i] != data::kIgnoredTarget ? 1 : 0;
  const trace::Span span("trained-token all-reduce", "step");
  count_buf_.data<double>()[0] = double(local);
  groups_.world->wait(groups_.world->all_reduce(count_buf_));
  return int64_t(count_buf_.data<double>()[0]) / tensor;
}

void Trainer::upload_micro_batch(int64_t index) {
  act_.ids.copy_(ids_host_.select(0, index));
  act_.targets.copy_(targets_host_.select(0, index));
  if (act_.documents) act_.doc_start.reshape({act_.doc_start.numel()}).copy_(doc_start_host_.select(0, index));
}

StepVotes Trainer::all_reduce_votes(model::LossSum local) {
  StepVotes mine;
  // The ranks of a tensor group computed the same losses on the same micro-batch: one of
  // them counts them.
  if (engine_groups_.tensor->rank() != 0) local = model::LossSum{};
  mine.loss = local;
  mine.preempted_ranks = preemption_signal() != 0 ? 1 : 0;
  mine.busy_writers = checkpoints_.local_busy() ? 1 : 0;
  const trace::Span span("loss all-reduce", "step");
  last_votes_ = train::all_reduce_votes(mine, *groups_.world, votes_buf_);
  return last_votes_;
}

namespace {

void add_to(model::LossSum& total, const model::LossSum& l) {
  total.sum += l.sum;
  total.tokens += l.tokens;
  total.router_aux += l.router_aux;
  total.router_z += l.router_z;
  total.micro_batches += l.micro_batches;
}

}  // namespace

model::LossSum Trainer::accumulate_gradients(double grad_scale, double router_scale) {
  const int64_t accum = cfg_.train.grad_accum_steps;
  const bool moe = model_.config().is_moe();
  engine_.begin_step(int(accum));
  if (expert_load_) expert_load_->begin_step();
  // The ranks of a tensor group routed the same tokens (Note [Experts under tensor
  // parallelism]): one of them counts them, so the world's sum is the data-parallel ranks'
  // and the routing biases are one process's.
  const bool counts_expert_load = engine_groups_.tensor->rank() == 0;
  model::LossSum local;
  const int64_t micro = cfg_.train.micro_batch_size;
  const int64_t data_ranks = groups_.mesh.data_parallel_size();
  const int64_t data_rank = groups_.mesh.data_parallel_rank(groups_.world->rank());
  for (int64_t a = 0; a < accum; ++a) {
    const trace::Span span("micro-batch", "step", "index", a);
    engine_.begin_micro_batch(int(a));
    upload_micro_batch(a);
    // Where this micro-batch's samples sit in the global order (the loader's rule): LoRA's
    // dropout masks follow the samples, not the rank that happens to hold them.
    act_.first_sample = samples_seen_ + (a * data_ranks + data_rank) * micro;
    if (device_.is_cpu()) {
      add_to(local, model_.forward_backward(act_, engine_, grad_scale, router_scale));
      if (expert_load_ && counts_expert_load) expert_load_->add(model_, act_);
    } else {
      // Enqueue only; the losses wait on the device for one read-back after the last.
      model_.enqueue_forward_backward(act_, engine_, grad_scale, router_scale);
      step_losses_.select(0, a).copy_(act_.losses);
      if (moe) {
        // The router statistics live in the activations the next micro-batch overwrites:
        // read them now (a mixture of experts waits per layer anyway, for its group sizes).
        const model::RouterLosses r = model_.router_losses(act_);
        add_to(local, model::LossSum{0, 0, r.aux, r.z, 1});
        if (counts_expert_load) expert_load_->add(model_, act_);
      }
    }
  }
  if (!device_.is_cpu()) {
    const trace::Span span("loss read-back", "step");
    const Tensor losses = step_losses_.to(Device::cpu());  // the step's one wait for the loss
    for (int64_t a = 0; a < accum; ++a)
      add_to(local, model::sum_losses(losses.select(0, a), targets_host_.select(0, a)));
  }
  return local;
}

obs::StepMetrics Trainer::train_step() {
  const auto t0 = std::chrono::steady_clock::now();
  Allocator& mem = allocator_for(device_);
  mem.reset_peak();
  const uint64_t bytes0 = comm_bytes();
  const double wait0 = comm_wait_seconds();
  // Expert parallelism: the time spent in the tokens' all-to-alls (and their counts).
  const dist::Communicator* expert = groups_.mesh.shape().expert > 1 ? engine_groups_.expert.get() : nullptr;
  const double a2a0 = expert != nullptr ? expert->stats().wait_seconds : 0;
  const double data_wait0 = data_.train_loader->wait_seconds();
  const int world = groups_.world->size();
  const int data_ranks = groups_.mesh.data_parallel_size();
  const int64_t global_batch = int64_t(cfg_.train.micro_batch_size) * cfg_.train.grad_accum_steps * data_ranks;
  ++step_;
  dist::set_watchdog_step(step_);
  const trace::Span step_span("step", "step", "step", step_);

  // The global batch's target positions, and those of them trained (Note [Token-weighted loss]).
  const int64_t step_tokens = global_batch * cfg_.train.seq_len;
  const int64_t trained_tokens = stage_step_batches();
  // float16: the backward pass runs on the loss times the loss scale (1 otherwise).
  const double loss_scale = scaler_.scale();
  // A mixture of experts' router losses: the mean over every micro-batch of every rank, as
  // each forward of transformers computes its own.
  const double router_scale = loss_scale / double(cfg_.train.grad_accum_steps * data_ranks);
  const model::LossSum total =
      all_reduce_votes(accumulate_gradients(trained_tokens > 0 ? loss_scale / double(trained_tokens) : 0.0,
                                            router_scale)).loss;
  const model::LlamaConfig& mc = model_.config();
  // No trained target in the whole global batch (every example masked): no loss, zero gradients.
  const double ce_loss = total.tokens > 0 ? total.sum / double(total.tokens) : 0.0;
  std::optional<double> aux_loss, z_loss;
  if (mc.is_moe()) {
    aux_loss = total.router_aux / double(total.micro_batches);
    z_loss = total.router_z / double(total.micro_batches);
  }
  // The objective, as transformers' MixtralForCausalLM reports it: cross-entropy plus the
  // weighted router losses (just the cross-entropy for Llama).
  const double loss = ce_loss + (mc.is_moe() ? mc.router_aux_loss_coef * *aux_loss + mc.router_z_loss_coef * *z_loss : 0.0);
  // Every rank sees the same all-reduced loss and norm, so every rank stops alike.
  if (!std::isfinite(loss)) {
    throw Diverged(fmt::format("loss is {} at step {}{}", std::isnan(loss) ? "nan" : fmt::format("{}", loss), step_,
                               cfg_.train.dtype == DType::F16 ? " (float16 activations may overflow: try bfloat16)" : ""),
                   step_, step_ - 1);
  }

  // The norm of the scaled gradients: not finite when float16 overflowed (then the step is
  // skipped); with any other dtype the weights behind it are diverged.
  const double scaled_norm = engine_.grad_norm();
  if (!std::isfinite(scaled_norm) && !scaler_.enabled())
    throw Diverged(fmt::format("the gradient norm is {} at step {}",
                               std::isnan(scaled_norm) ? "nan" : fmt::format("{}", scaled_norm), step_),
                   step_, step_ - 1);
  const bool apply = scaler_.update(!std::isfinite(scaled_norm));
  const double grad_norm = scaled_norm / loss_scale;
  const double lr = schedule_.at(step_);
  if (apply) {
    const double clip = optim::clip_factor(grad_norm, cfg_.train.grad_clip);
    // AdamW counts only the steps it took (torch.optim skips its step count with the step).
    engine_.optimizer_step(adamw_, lr, step_ - scaler_.skipped_steps(), clip / loss_scale);
  }
  tokens_seen_ += step_tokens;
  samples_seen_ += global_batch;

  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  obs::StepMetrics m;
  m.step = step_;
  m.loss = loss;
  if (mc.is_moe()) {
    expert_load_->all_reduce(*groups_.world);
    m.expert_load = expert_load_->counts();
    m.expert_imbalance = expert_load_->imbalance();
    m.dropped = expert_load_->dropped();
    // Auxiliary-loss-free balancing moves with the optimizer (a skipped float16 step moves
    // nothing), from the step's global counts: every rank computes the same biases.
    if (const double rate = cfg_.model.router_bias_update_rate; apply && rate > 0)
      model_.router_bias()->update(m.expert_load, rate);
    m.ce_loss = ce_loss;
    m.aux_loss = aux_loss;
    if (mc.router_z_loss_coef > 0) m.z_loss = z_loss;
  }
  m.lr = lr;
  m.grad_norm = grad_norm;
  m.step_ms = secs * 1e3;
  m.samples_per_sec = double(global_batch) / secs;
  m.tokens_per_sec = double(step_tokens) / secs;
  m.gflops_per_sec = flops_per_token_ * double(step_tokens) / secs / 1e9;
  if (peak_flops_) m.mfu = m.gflops_per_sec * 1e9 / double(world) / *peak_flops_;
  if (scaler_.enabled()) m.loss_scale = loss_scale;
  m.skipped = !apply;
  m.tokens = step_tokens;
  m.trained_tokens = total.tokens;
  m.tokens_seen = tokens_seen_;
  m.peak_tensor_bytes = mem.stats().peak_bytes;
  std::tie(m.peak_mem_group, m.peak_mem_group_bytes) = mem.peak_top_group();
  m.comm_bytes = comm_bytes() - bytes0;
  m.comm_wait_ms = (comm_wait_seconds() - wait0) * 1e3;
  if (expert != nullptr) m.all_to_all_ms = (expert->stats().wait_seconds - a2a0) * 1e3;
  m.world_size = world;
  m.mesh = groups_.mesh.shape().str();
  m.tensor_parallel = groups_.mesh.shape().tensor;
  m.expert_parallel = groups_.mesh.shape().expert;
  m.data_wait_ms = (data_.train_loader->wait_seconds() - data_wait0) * 1e3;
  return m;
}

double Trainer::evaluate(int batches) { return evaluate_split(batches).loss; }

Trainer::EvalResult Trainer::evaluate_split(int batches) {
  FSDP_CHECK(batches >= 0, "eval.batches must be >= 0 (0 = the whole split), got {}", batches);
  const trace::Span span("evaluate", "eval");
  // Only `fsdp_train eval` gets here without shards (a training run that evaluates was
  // refused at start-up): the config's error, nothing ran.
  if (data_.val_loader == nullptr) throw config::ConfigError(data_.val_error);
  data::Loader& loader = *data_.val_loader;
  loader.seek(0);
  const int64_t micro = cfg_.train.micro_batch_size, T = cfg_.train.seq_len;
  // The whole split: as many steps as cover it, the rows of the last one past its end (the
  // loader wraps around to the start) masked, so every sample counts once.
  const int64_t N = data_.val->num_samples(), per_step = micro * groups_.mesh.data_parallel_size();
  const int64_t steps = batches > 0 ? batches : (N + per_step - 1) / per_step;
  model::LossSum local;
  for (int64_t b = 0; b < steps; ++b) {
    if (batches > 0) {
      load_micro_batch(loader, 0);
    } else {
      load_micro_batch(loader, 0, std::clamp<int64_t>(N - loader.first_position(loader.position()), 0, micro));
    }
    const model::LossSum l = model_.forward(act_, engine_);
    local.sum += l.sum;
    local.tokens += l.tokens;
  }
  // Over the trained targets of every batch of every rank, as training's loss.
  const model::LossSum total = all_reduce_votes(local).loss;
  EvalResult r;
  r.loss = total.tokens > 0 ? total.sum / double(total.tokens) : 0.0;
  r.trained_targets = total.tokens;
  // Rows and target positions: every data-parallel rank read as many (one tensor group's ranks
  // read the same rows).
  r.samples = batches > 0 ? steps * per_step : N;
  r.targets = r.samples * T;
  return r;
}

int Trainer::run() {
  const bool rank0 = groups_.world->rank() == 0;
  std::unique_ptr<obs::MetricsWriter> metrics;
  if (rank0 && cfg_.logging.metrics) {
    std::error_code ec;
    std::filesystem::create_directories(cfg_.run.dir, ec);  // made by check_output_dirs; its errors are named there
    const std::string path = (std::filesystem::path(cfg_.run.dir) / "metrics.jsonl").string();
    // A resumed run continues the file: drop the steps logged after the checkpoint (the
    // killed run's), which are about to be trained again.
    if (!resumed_from().empty()) obs::truncate_metrics_after(path, step_);
    metrics = std::make_unique<obs::MetricsWriter>(path, /*truncate=*/resumed_from().empty());
  }
  if (rank0) write_effective_config();
  log_run_start();
  try {
    return train_loop(metrics.get());
  } catch (const Diverged& d) {
    finish_checkpoint();  // a background save of an earlier step commits first
    const std::string line = handle_divergence(d, config::checkpoint_dir(cfg_), rank0);
    if (rank0) spdlog::error("{}", line);
    return kExitError;
  }
}

int Trainer::train_loop(obs::MetricsWriter* metrics) {
  const auto& t = cfg_.train;
  const bool rank0 = groups_.world->rank() == 0;
  obs::Observability outputs(cfg_, groups_, device_, step_ + 1);
  // A router whose load stays at or above half the collapsed ratio E/k for 20 steps in a
  // row: said once (see obs::ImbalanceWatch; docs/mixtral.md says what healthy looks like).
  std::optional<obs::ImbalanceWatch> imbalance;
  if (model_.config().is_moe()) {
    const auto& mc = model_.config();
    imbalance.emplace(std::max(1.5, 0.5 * double(mc.num_experts) / double(mc.experts_per_token)), 20);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t first = step_;
  while (step_ < t.max_steps) {
    outputs.before_step(step_ + 1);
    obs::StepMetrics m = train_step();
    outputs.after_train_step(step_);
    m.max_rss_bytes = max_rss_bytes();
    m.run_id = run_id();
    if (t.eval_every > 0 && (step_ % t.eval_every == 0 || step_ == t.max_steps)) m.val_loss = evaluate(cfg_.eval.batches);
    // Wall time of this process's steps (evaluations included), and the rest at that pace.
    m.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    m.eta_s = m.elapsed_s / double(step_ - first) * double(t.max_steps - step_);
    if (imbalance && rank0) {
      if (const std::string w = imbalance->observe(step_, m.expert_imbalance); !w.empty()) spdlog::warn("{}", w);
    }
    // metrics.jsonl gets every step (resume and equivalence checks compare whole loss
    // curves); the console gets one line per log_every steps. Rank 0 speaks for all.
    if (metrics) metrics->write(m);
    outputs.log_step(m);
    if (rank0 && (step_ % t.log_every == 0 || step_ == 1 || step_ == t.max_steps || m.val_loss)) {
      spdlog::info("{}", obs::format_step_line(m, t.max_steps));
    }
    checkpoints_.commit_ready(last_votes_.busy_writers);
    if (last_votes_.preempted_ranks > 0) {
      // Every rank saw the same count in the same all-reduce, so all stop at this step.
      spdlog::warn("preemption signal ({} rank(s)): saving a checkpoint at step {} and exiting with code {} so the "
                   "job can be requeued",
                   last_votes_.preempted_ranks, step_, kExitPreempted);
      if (!checkpoints_.saved_at(step_)) save_checkpoint();
      finish_checkpoint();
      outputs.finish(step_);
      check_final_checkpoint("the preemption checkpoint");
      return kExitPreempted;
    }
    if (checkpoints_.due(step_)) save_checkpoint();
    outputs.end_step(step_);
  }
  if (!checkpoints_.saved_at(step_)) save_checkpoint();
  finish_checkpoint();
  outputs.finish(step_);
  check_final_checkpoint("the final checkpoint");
  spdlog::info("done: {} steps, {} tokens", step_, tokens_seen_);
  return kExitOk;
}

// Under checkpoint.stop_on_error: false a failed save only logs; but a run whose last
// state never reached the disk has not done its work (and a requeue after the preemption
// exit would resume from an older step than the log claims), so it fails.
void Trainer::check_final_checkpoint(const char* which) const {
  FSDP_CHECK(checkpoints_.committed_at(step_),
             "{} at step {} could not be saved (see the error above): the run's result is not on disk", which, step_);
}

}  // namespace fsdp::train
