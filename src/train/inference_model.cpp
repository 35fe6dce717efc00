// Loading a finished model for inference; see inference_model.h.
#include "fsdp/train/inference_model.h"

#include <cstdlib>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "fsdp/ckpt/checkpoint_reader.h"
#include "fsdp/ckpt/hf_import.h"
#include "fsdp/core/error.h"
#include "fsdp/train/lora_model.h"
#if defined(FSDP_WITH_CUDA)
#include "fsdp/core/cuda.h"
#endif

namespace fsdp::train {

namespace fs = std::filesystem;

namespace {

// The fsdp_train checkpoint to read for `path`, its files checked against their CRCs: the
// path itself when it is one (step_<N>/ with a manifest; a corrupt file is an error naming
// it), else the newest step_<N> under it (a checkpoint.dir) that verifies, skipping broken
// ones as resume does; "" when there is none.
std::string find_checkpoint(const std::string& path) {
  if (ckpt::is_checkpoint_dir(path)) {
    ckpt::CheckpointReader(path).verify();
    return path;
  }
  for (const std::string& candidate : ckpt::list_checkpoints(path)) {
    try {
      ckpt::CheckpointReader(candidate).verify();
      return candidate;
    } catch (const std::exception& e) {
      spdlog::warn("skipping checkpoint {}: {}", candidate, e.what());
    }
  }
  return "";
}

// A LoRA model's units with the adapters merged (train/lora_model.h).
InferenceModel merged_model(LoraModel& lora, std::string kind) {
  InferenceModel m;
  m.kind = std::move(kind);
  m.config = lora.config();
  m.params = std::make_unique<InferenceParams>(lora.plain_units());
  for (int u = 0; u < int(lora.plain_units().size()); ++u) m.params->params(u).copy_(lora.merged(u));
  return m;
}

}  // namespace

InferenceParams::InferenceParams(const std::vector<model::UnitLayout>& units) {
  for (const auto& u : units) params_.push_back(Tensor::empty({u.numel}, DType::F32));
}

Tensor InferenceParams::grads(int) { FSDP_FAIL("generate: the model holds no gradients"); }

void InferenceParams::move_to(Device device, DType dtype) {
  if (device.is_cpu() && dtype == DType::F32) return;
  for (Tensor& p : params_) {
    Tensor moved = Tensor::empty(p.sizes(), dtype, device);
    moved.copy_(p);
    p = moved;
  }
}

Device resolve_inference_device(const std::string& want) {
#if defined(FSDP_WITH_CUDA)
  const int visible = cuda::device_count();
  if (want == "cuda" || (want == "auto" && cuda::real_gpu_visible())) {
    FSDP_CHECK(visible > 0, "--device cuda: no CUDA device is visible (CUDA_VISIBLE_DEVICES='{}')",
               std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "");
    return Device::cuda(0);
  }
#else
  FSDP_CHECK(want != "cuda", "--device cuda: this fsdp_train was built without the CUDA backend");
#endif
  return Device::cpu();
}

InferenceModel load_inference_model(const std::string& path, const std::string& adapter, const std::string& base) {
  std::error_code ec;
  FSDP_CHECK(fs::is_directory(path, ec), "--checkpoint {}: no such directory{}", path, ec ? ": " + ec.message() : "");
  InferenceModel m;
  if (!adapter.empty()) {
    FSDP_CHECK(fs::exists(fs::path(path) / "config.json", ec),
               "--adapter {} needs --checkpoint to be its base's Hugging Face folder ({} not found)", adapter,
               (fs::path(path) / "config.json").string());
    const auto lora = LoraModel::from_peft(path, adapter);
    return merged_model(*lora, "Hugging Face folder " + path + " with the PEFT adapter " + adapter + " merged");
  }
  if (fs::exists(fs::path(path) / "config.json", ec)) {
    FSDP_CHECK(base.empty(), "--base {} is for a LoRA checkpoint, but --checkpoint {} is a Hugging Face folder", base,
               path);
    m.kind = "Hugging Face folder " + path;
    m.config = ckpt::read_hf_llama_config(path);
    const auto units = model::llama_units(m.config);
    m.params = std::make_unique<InferenceParams>(units);
    const ckpt::SafetensorsFolder folder(path);
    ckpt::check_unused_tensors(folder, m.config);
    for (int u = 0; u < int(units.size()); ++u) ckpt::load_hf_unit(folder, units[size_t(u)], m.params->params(u));
    return m;
  }
  if (const std::string dir = find_checkpoint(path); !dir.empty()) {
    const ckpt::CheckpointReader reader(dir);
    if (reader.manifest().base) {
      const auto lora = LoraModel::from_checkpoint(dir, base);
      InferenceModel merged = merged_model(*lora, fmt::format("fsdp_train LoRA checkpoint {} (step {}) merged into {}", dir,
                                             reader.manifest().state.step,
                                             lora->base_path().empty() ? "its seeded base" : lora->base_path()));
      merged.router_bias = reader.manifest().state.router_bias;
      return merged;
    }
    FSDP_CHECK(base.empty(), "--base {} is for a LoRA checkpoint, but {} holds a whole model (it has no base)", base,
               dir);
    m.kind = fmt::format("fsdp_train checkpoint {} (step {})", dir, reader.manifest().state.step);
    m.config = reader.manifest().model;
    const auto units = model::llama_units(m.config);
    reader.check_model(m.config, units);
    m.params = std::make_unique<InferenceParams>(units);
    // One rank's whole units, whatever tensor layout saved them.
    for (int u = 0; u < int(units.size()); ++u) reader.read(units[size_t(u)], u, "master", 0, m.params->params(u));
    m.router_bias = reader.manifest().state.router_bias;
    return m;
  }
  FSDP_FAIL("--checkpoint {}: not a model: expected a Hugging Face Llama folder ({} not found) or an fsdp_train "
            "checkpoint (step_<N>/ with manifest.json, or a checkpoint.dir holding one)",
            path, (fs::path(path) / "config.json").string());
}

}  // namespace fsdp::train
