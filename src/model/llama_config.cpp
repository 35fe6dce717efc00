#include "fsdp/model/llama_config.h"

#include <fmt/format.h>

#include "fsdp/core/error.h"

namespace fsdp::model {

int64_t LlamaConfig::num_parameters() const {
  const int64_t C = hidden_size, F = intermediate_size;
  const int64_t block = C * qkv_dim() + q_dim() * C + 3 * C * F + 2 * C;
  return vocab_size * C + num_layers * block + C + vocab_size * C;
}

double LlamaConfig::train_flops_per_token(int64_t seq_len) const {
  const double C = double(hidden_size), F = double(intermediate_size);
  const double gemm_params = double(num_layers) * (C * double(qkv_dim()) + double(q_dim()) * C + 3 * C * F) +
                             double(vocab_size) * C;
  // QK^T and PV over the causal triangle: on average (seq_len + 1) / 2 keys per query.
  const double attn = double(num_layers) * 2.0 * 2.0 * double(q_dim()) * (double(seq_len) + 1) / 2.0;
  return 3.0 * (2.0 * gemm_params + attn);
}

void LlamaConfig::validate() const {
  auto positive = [](int64_t v, const char* key) {
    FSDP_CHECK(v > 0, "model.{} must be > 0, got {}", key, v);
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_layers, "num_layers");
  positive(num_heads, "num_heads");
  positive(num_kv_heads, "num_kv_heads");
  positive(max_seq_len, "max_seq_len");
  FSDP_CHECK(hidden_size % num_heads == 0, "model.hidden_size ({}) must be divisible by model.num_heads ({})",
             hidden_size, num_heads);
  FSDP_CHECK(num_heads % num_kv_heads == 0, "model.num_heads ({}) must be divisible by model.num_kv_heads ({})",
             num_heads, num_kv_heads);
  FSDP_CHECK(head_dim() % 2 == 0, "head dim hidden_size/num_heads = {} must be even for rotary embeddings",
             head_dim());
  FSDP_CHECK(rope_theta > 0, "model.rope_theta must be > 0, got {}", rope_theta);
  FSDP_CHECK(norm_eps > 0, "model.norm_eps must be > 0, got {}", norm_eps);
}

std::string LlamaConfig::summary() const {
  return fmt::format(
      "vocab {} hidden {} intermediate {} layers {} heads {} kv_heads {} head_dim {} max_seq_len {} rope_theta {} "
      "norm_eps {} ({:.2f}M parameters)",
      vocab_size, hidden_size, intermediate_size, num_layers, num_heads, num_kv_heads, head_dim(), max_seq_len,
      rope_theta, norm_eps, double(num_parameters()) / 1e6);
}

namespace {

// Published shapes: the config.json files of meta-llama/Llama-2-{7b,13b,70b}-hf and
// codellama/CodeLlama-7b-hf. Fields in LlamaConfig's order: vocab, hidden, intermediate,
// layers, heads, kv heads, max_seq_len, rope_theta, norm_eps.
constexpr LlamaPreset kPresets[] = {
    {"tiny", {1024, 128, 352, 4, 4, 2, 512, 10000.0, 1e-5}},
    {"llama2_7b", {32000, 4096, 11008, 32, 32, 32, 4096, 10000.0, 1e-5}},
    {"llama2_13b", {32000, 5120, 13824, 40, 40, 40, 4096, 10000.0, 1e-5}},
    {"llama2_70b", {32000, 8192, 28672, 80, 64, 8, 4096, 10000.0, 1e-5}},
    {"codellama_7b", {32016, 4096, 11008, 32, 32, 32, 16384, 1000000.0, 1e-5}},
};

}  // namespace

std::span<const LlamaPreset> llama_presets() { return kPresets; }

std::vector<std::string_view> llama_preset_names() {
  std::vector<std::string_view> names;
  for (const LlamaPreset& p : kPresets) names.push_back(p.name);
  return names;
}

LlamaConfig llama_preset(const std::string& name) {
  for (const LlamaPreset& p : kPresets)
    if (p.name == name) return p.config;
  FSDP_FAIL("unknown model preset '{}' (known: {})", name, fmt::join(llama_preset_names(), ", "));
}

}  // namespace fsdp::model
