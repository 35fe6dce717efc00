// What a run says about itself as it starts: the model, the device, the batch, the FSDP
// layout and where its groups run, LoRA, the data; and the effective config it writes to
// <run.dir>/config.yaml. The Trainer's members of that job; the step and the loop are in
// trainer.cpp.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "fsdp/data/synthetic.h"
#include "fsdp/train/trainer.h"
#if defined(FSDP_WITH_CUDA)
#include "fsdp/core/cuda.h"
#endif

namespace fsdp::train {

namespace {

// "world ranks 0-1 on n01" / "world ranks 0, 2 on n01, n02": a group and where it runs.
std::string describe_placement(const dist::Communicator& c, const dist::WorldInfo& w) {
  std::vector<std::string> hosts;
  for (int r : c.world_ranks()) {
    const std::string& h = r >= 0 && r < int(w.hosts.size()) ? w.hosts[size_t(r)] : w.hostname;
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
  }
  return fmt::format("{} on {}", dist::describe_world_ranks(c.world_ranks()), fmt::join(hosts, ", "));
}

}  // namespace

void Trainer::log_device() const {
  const std::string dtype = dtype_name(cfg_.train.dtype);
  if (device_.is_cpu()) {
    spdlog::info("device: cpu, {} compute", dtype);
    return;
  }
#if defined(FSDP_WITH_CUDA)
  const int i = device_.index;
  spdlog::info("device: one GPU per rank ({} here: {}, {:.0f} GiB{}), {} compute{}{}, collectives over {}", device_.str(),
               cuda::device_name(i), double(cuda::device_memory_bytes(i)) / double(1ull << 30),
               cuda::is_emulated() ? ", the CPU emulator: no GPU timing" : "", dtype,
               scaler_.enabled() ? fmt::format(" with dynamic loss scaling from {:g}", scaler_.scale()) : "",
               cfg_.train.tf32 ? ", TF32 GEMMs" : "",
               engine_groups_.shard->size() > 1 || engine_groups_.replicate->size() > 1 ? "NCCL" : "none (one rank)");
  if (peak_flops_) {
    spdlog::info("device: MFU is model FLOP/s over {:.0f} TFLOP/s (dense bf16 peak of this GPU; FSDP_PEAK_TFLOPS "
                 "overrides)",
                 *peak_flops_ / 1e12);
  }
#endif
}

void Trainer::log_lora() const {
  const model::PeftSpec& p = model_.peft();
  int64_t trainable = 0;
  for (const auto& u : model_.units()) trainable += u.numel;
  const int64_t total = model_.config().num_parameters();
  spdlog::info("lora: r {} alpha {} ({}scale {:.4g}), dropout {}, on {}: {} trainable parameters ({:.3f}% of {}); "
               "the base is frozen{} ({:.1f} MiB of frozen shards on this rank, from {})",
               p.lora.rank, p.lora.alpha, p.lora.rslora ? "rslora, " : "", p.lora.scale(), p.lora.dropout,
               fmt::join(p.lora.targets, ", "), trainable, 100.0 * double(trainable) / double(total), total,
               p.quantization == model::Quantization::Nf4 ? " in NF4" : "",
               double(engine_.frozen_bytes()) / (1 << 20),
               cfg_.model.init_from.empty() ? std::string("the seeded initialiser") : cfg_.model.init_from);
}

void Trainer::log_run_start() const {
  const auto& t = cfg_.train;
  spdlog::info("model: {}", model_.config().summary());
  log_device();
  const int world = groups_.world->size(), data_ranks = groups_.mesh.data_parallel_size();
  auto ranks = [](int64_t n) { return fmt::format("{} rank{}", n, n == 1 ? "" : "s"); };
  // Under tensor parallelism a tensor group reads one micro-batch: the batch counts the
  // data-parallel ranks.
  spdlog::info("batch: {} sequences x {} tokens per micro-batch, {} accumulation step{}, {}{} = {} sequences, {} "
               "tokens per step{}",
               t.micro_batch_size, t.seq_len, t.grad_accum_steps, t.grad_accum_steps == 1 ? "" : "s",
               ranks(data_ranks), data_ranks == world ? "" : " (data-parallel)",
               int64_t(t.micro_batch_size) * t.grad_accum_steps * data_ranks,
               int64_t(t.micro_batch_size) * t.grad_accum_steps * data_ranks * t.seq_len,
               t.global_batch_size > 0 ? " (train.global_batch_size)" : "");
  const dist::MeshShape& shape = groups_.mesh.shape();
  // MeshShape::str names the expert dimension only when it is there.
  const char* dims = shape.expert > 1 ? "replicate x shard x expert x tensor" : "replicate x shard x tensor";
  if (shape.tensor > 1) {
    spdlog::info("mesh {} ({}): tensor parallelism over {} with sequence parallelism; rank 0's tensor group is {}",
                 shape.str(), dims, ranks(shape.tensor), describe_placement(*groups_.tensor, groups_.world_info));
  }
  if (shape.expert > 1) {
    // Under tensor parallelism too, each rank holds its tensor slices of its experts.
    spdlog::info("mesh {} ({}): expert parallelism over {}, {} experts per rank{}; rank 0's expert group is {}, its "
                 "expert units sharded over {}",
                 shape.str(), dims, ranks(shape.expert), model_.config().num_experts / shape.expert,
                 shape.tensor > 1 ? fmt::format(" (1/{} of each: its tensor slices)", shape.tensor) : "",
                 describe_placement(*groups_.expert, groups_.world_info), ranks(groups_.expert_shard->size()));
  }
  spdlog::info("fsdp: {} over {} on {} node{} (shard group {}, replicate group {}), params {} / reduce {}, "
               "{:.1f} MiB of sharded state on this rank",
               config::to_string(cfg_.fsdp.sharding_strategy), ranks(world), groups_.world_info.num_nodes,
               groups_.world_info.num_nodes == 1 ? "" : "s",
               groups_.shard->size(), groups_.replicate->size(), dtype_name(cfg_.fsdp.param_dtype),
               dtype_name(cfg_.fsdp.reduce_dtype), double(engine_.persistent_bytes()) / (1 << 20));
  if (cfg_.lora.enabled) log_lora();
  if (world > 1) {
    spdlog::info("fsdp: rank 0's shard group is {}; its replicate group {}",
                 describe_placement(*groups_.shard, groups_.world_info),
                 describe_placement(*groups_.replicate, groups_.world_info));
  }
  if (cfg_.data.source == config::DataSource::Synthetic) {
    spdlog::info("data: synthetic Markov chain (loss floor {:.3f} nats, uniform guess {:.3f})",
                 data::SyntheticSource::entropy_rate(), std::log(double(model_.config().vocab_size)));
  } else {
    spdlog::info("data: {} ({} windows of {} tokens per epoch, {} per step; validation: {})", cfg_.data.path,
                 data_.train->num_samples(), t.seq_len + 1, int64_t(t.micro_batch_size) * t.grad_accum_steps * data_ranks,
                 data_.val ? std::to_string(data_.val->num_samples()) + " windows" : std::string("none"));
  }
}

// <run.dir>/config.yaml: the effective config of the run's latest start (what --set and
// train.global_batch_size made of the file), which `--config` takes back as it is.
void Trainer::write_effective_config() const {
  namespace fs = std::filesystem;
  const fs::path path = fs::path(cfg_.run.dir) / "config.yaml", tmp = fs::path(path.string() + ".tmp");
  std::error_code ec;
  fs::create_directories(cfg_.run.dir, ec);
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "# The effective config of the run in this directory, as fsdp_train " << FSDP_VERSION
        << " last started it (every key; `fsdp_train train --config` takes it back).\n"
        << config::dump_yaml(cfg_);
    if (!out.good()) ec = std::make_error_code(std::errc::io_error);
  }
  if (!ec) fs::rename(tmp, path, ec);
  if (ec) {
    spdlog::warn("run.dir: cannot write {}: {}", path.string(), ec.message());
    return;
  }
  spdlog::info("config: the effective config is in {} (logging.level: debug prints it)", path.string());
}

}  // namespace fsdp::train
