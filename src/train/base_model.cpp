// A LoRA run's frozen base and adapters from the config; see base_model.h.
#include "fsdp/train/base_model.h"

#include <filesystem>
#include <initializer_list>
#include <vector>

#include <spdlog/spdlog.h>

#include "fsdp/ckpt/hf_frozen.h"
#include "fsdp/ckpt/hf_import.h"
#include "fsdp/ckpt/peft_adapter.h"
#include "fsdp/ckpt/safetensors.h"
#include "fsdp/config/model_options.h"
#include "fsdp/model/frozen_bytes.h"
#include "fsdp/model/param_init.h"

namespace fsdp::train {

namespace {

// The seeded initialiser as a frozen base: a slot's values are those one rank's plain
// layout's slot of the same name gets from init_unit, so LoRA on a seeded base starts from
// exactly the model a full fine-tune with this seed would; a tensor-parallel slot reads its
// slice of them (FrozenSlot::tp), a run contiguous in the whole parameter at a time.
class SeededFrozenSource final : public model::FrozenSource {
 public:
  SeededFrozenSource(const model::UnitLayout& plain, int unit, uint64_t seed, double init_std)
      : plain_(plain), unit_(unit), seed_(seed), std_(init_std) {}
  void values(const model::FrozenSlot& slot, int64_t first, const Tensor& out) override {
    const int64_t whole = plain_.slot(slot.name).offset;
    const Tensor flat = out.reshape({out.numel()});
    model::for_each_whole_run(slot.shape, slot.tp, first, out.numel(), [&](int64_t at, int64_t w, int64_t run) {
      model::init_unit(plain_, unit_, seed_, std_, flat.narrow(0, at - first, run), whole + w);
    });
  }

 private:
  const model::UnitLayout& plain_;
  int unit_;
  uint64_t seed_;
  double std_;
};

}  // namespace

BaseSource::BaseSource(const config::Config& cfg, const model::LlamaConfig& model_cfg)
    : seed_(uint64_t(cfg.train.seed)), init_std_(cfg.model.init_std) {
  if (!cfg.model.init_from.empty()) {
    folder_ = std::make_unique<ckpt::SafetensorsFolder>(cfg.model.init_from);
    ckpt::check_unused_tensors(*folder_, model_cfg);
  } else {
    model::LlamaConfig one = model_cfg;  // one rank's layout: slices and experts read from it
    one.tensor_parallel = 1;
    one.expert_parallel = 1;
    plain_ = model::llama_units(one);
  }
}

BaseSource::~BaseSource() = default;

void BaseSource::fill(const model::UnitLayout& unit, int u, const Tensor& host, int64_t begin) {
  if (folder_) {
    ckpt::HfFrozenSource source(*folder_);
    model::fill_frozen_bytes(unit, host, begin, source);
    return;
  }
  // An expert unit's experts are slots of its block in one process's layout (experts_of).
  if (unit.experts_of >= 0) u = unit.experts_of;
  SeededFrozenSource source(plain_[size_t(u)], u, seed_, init_std_);
  model::fill_frozen_bytes(unit, host, begin, source);
}

void init_frozen_base(const config::Config& cfg, const model::Llama& model, FsdpEngine& engine) {
  if (!cfg.lora.enabled) return;
  BaseSource base(cfg, model.config());
  engine.init_frozen([&](int u, int64_t begin, const Tensor& host) {
    base.fill(model.units()[size_t(u)], u, host, begin);
  });
}

void init_adapters(const config::Config& cfg, const model::Llama& model, FsdpEngine& engine) {
  const std::vector<model::UnitLayout>& units = model.units();
  if (cfg.lora.init_from.empty()) {
    engine.init_shards([&](int u, int64_t begin, const Tensor& shard) {
      model::init_unit(units[size_t(u)], u, uint64_t(cfg.train.seed), cfg.model.init_std, shard, begin);
    });
    return;
  }
  const std::string& dir = cfg.lora.init_from;
  const ckpt::PeftAdapterConfig adapter = ckpt::read_peft_adapter_config(dir);
  ckpt::check_peft_adapter_matches(adapter, model.peft().lora, model.config(), dir);
  const std::unique_ptr<ckpt::SafetensorsFolder> folder = ckpt::open_peft_adapter_weights(dir);
  engine.init_shards([&](int u, int64_t begin, const Tensor& shard) {
    ckpt::load_hf_unit(*folder, units[size_t(u)], shard, begin);
  });
  spdlog::info("lora: adapters from {} (trained on {})", dir,
               adapter.base_model_name_or_path.empty() ? std::string("an unnamed base") : adapter.base_model_name_or_path);
}

namespace {

// Each unit's CRC-32 and byte count of this rank's part of the frozen bytes, gathered over
// `groups` in turn (the first innermost): rank r's pair of unit u at 2 (r * units + u).
Tensor gather_crcs(Tensor mine, std::initializer_list<dist::Communicator*> groups) {
  for (dist::Communicator* g : groups) {
    if (g->size() == 1) continue;
    Tensor all = Tensor::zeros({mine.numel() * g->size()}, DType::F64);
    g->wait(g->all_gather(mine, all));
    mine = all;
  }
  return mine;
}

void set_crc(Tensor& t, int unit, uint32_t crc, int64_t bytes) {
  t.data<double>()[2 * unit] = double(crc);
  t.data<double>()[2 * unit + 1] = double(bytes);
}

}  // namespace

ckpt::BaseReference base_reference(const config::Config& cfg, const model::Llama& model, const FsdpEngine& engine,
                                   dist::Communicator& shard, dist::Communicator& tensor) {
  const int units = engine.num_units();
  Tensor mine = Tensor::zeros({2 * units}, DType::F64);
  if (tensor.size() == 1 && !model.config().expert_units()) {
    // This rank's CRC and byte count of each unit's frozen shard.
    for (int u = 0; u < units; ++u) {
      const Tensor& s = engine.frozen_shard(u);
      const int64_t valid = s.defined() ? engine.frozen_range(u).valid : 0;
      if (valid == 0) continue;
      const Tensor host = s.device().is_cpu() ? s : s.to(Device::cpu());
      set_crc(mine, u, ckpt::crc32_parallel(host.data_ptr(), size_t(valid)), valid);
    }
  } else {
    // Under tensor parallelism this rank's frozen bytes are slices, and under expert
    // parallelism its experts' are in units of their own, which would give another
    // fingerprint at every T or E: the fingerprint is one process's instead, each rank filling
    // and checksumming its 1 / (S x T) of one rank's layout of the frozen bytes, so a
    // checkpoint resumes at any layout (issue 27: checkpoints at any layout).
    model::LlamaConfig one = model.config();
    one.tensor_parallel = 1;
    one.expert_parallel = 1;
    const std::vector<model::UnitLayout> whole = model::lora_units(one, model.peft());
    BaseSource base(cfg, model.config());
    const int64_t parts = int64_t(shard.size()) * tensor.size();
    const int64_t part = int64_t(shard.rank()) * tensor.size() + tensor.rank();
    for (int u = 0; u < int(whole.size()); ++u) {
      const int64_t bytes = whole[size_t(u)].frozen_bytes;
      const int64_t begin = bytes * part / parts, end = bytes * (part + 1) / parts;
      if (end == begin) continue;
      const Tensor host = Tensor::empty({end - begin}, DType::U8);
      base.fill(whole[size_t(u)], u, host, begin);
      set_crc(mine, u, ckpt::crc32_parallel(host.data_ptr(), size_t(end - begin)), end - begin);
    }
  }
  // In rank order of the shard group (and inside it of the tensor group): the bytes' order.
  Tensor all = gather_crcs(mine, {&tensor, &shard});
  ckpt::BaseReference ref;
  // Absolute: `export --merge` and `generate` of the checkpoint run from anywhere, and a
  // relative path only means something from the training run's working directory.
  ref.path = absolute_base_path(cfg.model.init_from);
  ref.quantization = cfg.model.quantization;
  const int ranks = shard.size() * tensor.size();
  for (int u = 0; u < units; ++u) {
    for (int r = 0; r < ranks; ++r) {
      const double* p = all.data<double>() + 2 * (r * units + u);
      if (p[1] == 0) continue;
      ref.crc32 = ckpt::crc32_concat(ref.crc32, uint32_t(p[0]), uint64_t(p[1]));
      ref.bytes += uint64_t(p[1]);
    }
  }
  return ref;
}

std::string absolute_base_path(const std::string& init_from) {
  if (init_from.empty()) return "";
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::absolute(init_from, ec);
  return ec ? init_from : p.lexically_normal().string();
}

void check_same_base(const ckpt::BaseReference& saved, const ckpt::BaseReference& loaded,
                     const std::string& checkpoint) {
  auto named = [](const ckpt::BaseReference& b) {
    return fmt::format("{} ({}, {} bytes, CRC-32 {:08x})", b.path.empty() ? "the seeded base" : b.path,
                       b.quantization, b.bytes, b.crc32);
  };
  FSDP_CHECK(saved.crc32 == loaded.crc32 && saved.bytes == loaded.bytes && saved.quantization == loaded.quantization,
             "checkpoint {} holds adapters trained on {}, but this run's base is {}: not the same base model (set "
             "model.init_from and model.quantization to the base the adapters were trained on)",
             checkpoint, named(saved), named(loaded));
  if (saved.path != loaded.path)
    spdlog::info("checkpoint: the base moved from {} to {} (same fingerprint)", saved.path, loaded.path);
}

}  // namespace fsdp::train
