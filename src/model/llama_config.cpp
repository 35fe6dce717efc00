#include "fsdp/model/llama_config.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "fsdp/core/error.h"
#include "fsdp/model/expert_parallel.h"
#include "fsdp/model/rope_scaling.h"
#include "fsdp/model/tensor_parallel.h"

namespace fsdp::model {

namespace {

// Parameters of one block's MLP: the dense SwiGLU, or the router and `experts` of the
// num_experts SwiGLU experts (all of them for the model's size, k for one token's work).
int64_t mlp_parameters(const LlamaConfig& c, int64_t experts) {
  const int64_t C = c.hidden_size, F = c.intermediate_size;
  if (!c.is_moe()) return 3 * C * F;
  return C * c.num_experts + experts * 3 * C * F;
}

int64_t parameters(const LlamaConfig& c, int64_t experts) {
  const int64_t C = c.hidden_size;
  const int64_t block = C * c.qkv_dim() + c.q_dim() * C + mlp_parameters(c, experts) + 2 * C;
  const int64_t head = c.tie_word_embeddings ? 0 : c.vocab_size * C;  // a tied head reads the embedding
  return c.vocab_size * C + c.num_layers * block + C + head;
}

}  // namespace

int64_t LlamaConfig::num_parameters() const { return parameters(*this, num_experts); }

int64_t LlamaConfig::num_active_parameters() const { return parameters(*this, experts_per_token); }

double LlamaConfig::train_flops_per_token(int64_t seq_len) const {
  const double C = double(hidden_size);
  // The GEMMs one token runs through: for a mixture of experts, the router and the k
  // experts it was sent to (Mixtral's "active parameters"), not all of them.
  const double gemm_params = double(num_layers) * (C * double(qkv_dim()) + double(q_dim()) * C +
                                                   double(mlp_parameters(*this, experts_per_token))) +
                             double(vocab_size) * C;
  // QK^T and PV over the causal triangle: on average (seq_len + 1) / 2 keys per query.
  const double attn = double(num_layers) * 2.0 * 2.0 * double(q_dim()) * (double(seq_len) + 1) / 2.0;
  return 3.0 * (2.0 * gemm_params + attn);
}

namespace {

using Problem = std::optional<ShapeProblem>;

Problem out_of_range(std::string_view key, int64_t v, int64_t lo, int64_t hi) {
  if (v >= lo && v <= hi) return std::nullopt;
  return ShapeProblem{{key}, fmt::format("model.{} must be in [{}, {}], got {}", key, lo, hi, v)};
}

Problem sizes_problem(const LlamaConfig& c) {
  using L = ShapeLimits;
  const std::tuple<std::string_view, int64_t, int64_t> sizes[] = {
      {"vocab_size", c.vocab_size, L::vocab_size},
      {"hidden_size", c.hidden_size, L::hidden_size},
      {"intermediate_size", c.intermediate_size, L::intermediate_size},
      {"num_layers", c.num_layers, L::num_layers},
      {"num_heads", c.num_heads, L::num_heads},
      {"num_kv_heads", c.num_kv_heads, L::num_heads},
      {"max_seq_len", c.max_seq_len, L::max_seq_len},
  };
  for (const auto& [key, v, hi] : sizes)
    if (Problem p = out_of_range(key, v, 1, hi)) return p;
  if (Problem p = out_of_range("num_experts", c.num_experts, 0, L::num_experts)) return p;
  return std::nullopt;
}

Problem heads_problem(const LlamaConfig& c) {
  if (c.hidden_size % c.num_heads != 0)
    return ShapeProblem{{"hidden_size", "num_heads"},
                        fmt::format("model.hidden_size ({}) must be divisible by model.num_heads ({})", c.hidden_size,
                                    c.num_heads)};
  if (c.num_heads % c.num_kv_heads != 0)
    return ShapeProblem{{"num_heads", "num_kv_heads"},
                        fmt::format("model.num_heads ({}) must be divisible by model.num_kv_heads ({})", c.num_heads,
                                    c.num_kv_heads)};
  if (c.head_dim() % 2 != 0)
    return ShapeProblem{{"hidden_size", "num_heads"},
                        fmt::format("head dim model.hidden_size / model.num_heads = {} / {} = {} must be even for "
                                    "rotary embeddings",
                                    c.hidden_size, c.num_heads, c.head_dim())};
  return std::nullopt;
}

Problem routing_problem(const LlamaConfig& c) {
  if (c.is_moe() && (c.experts_per_token < 1 || c.experts_per_token > c.num_experts))
    return ShapeProblem{{"experts_per_token", "num_experts"},
                        fmt::format("model.experts_per_token must be in [1, model.num_experts = {}], got {}",
                                    c.num_experts, c.experts_per_token)};
  if (!c.is_moe() && c.experts_per_token != 0)
    return ShapeProblem{{"experts_per_token", "num_experts"},
                        fmt::format("model.experts_per_token = {} needs model.num_experts > 0", c.experts_per_token)};
  const std::pair<std::string_view, double> coefs[] = {{"router_aux_loss_coef", c.router_aux_loss_coef},
                                                       {"router_z_loss_coef", c.router_z_loss_coef}};
  for (const auto& [key, v] : coefs)
    if (!(v >= 0)) return ShapeProblem{{key}, fmt::format("model.{} must be >= 0, got {}", key, v)};
  return std::nullopt;
}

Problem rope_problem(const RopeScaling& s) {
  if (s.type == RopeScaling::Type::None) return std::nullopt;
  const auto finite = [](double v) { return std::isfinite(v); };
  if (!(finite(s.factor) && s.factor >= 1))
    return ShapeProblem{{"rope_scaling_factor"}, fmt::format("model.rope_scaling_factor must be >= 1 for {} scaling, got {}",
                                                             rope_scaling_name(s.type), s.factor)};
  if (s.type != RopeScaling::Type::Llama3) return std::nullopt;
  if (!(finite(s.low_freq_factor) && s.low_freq_factor > 0))
    return ShapeProblem{{"rope_low_freq_factor"},
                        fmt::format("model.rope_low_freq_factor must be > 0 for llama3 scaling, got {}", s.low_freq_factor)};
  if (!(finite(s.high_freq_factor) && s.high_freq_factor > s.low_freq_factor))
    return ShapeProblem{{"rope_high_freq_factor", "rope_low_freq_factor"},
                        fmt::format("model.rope_high_freq_factor must be > model.rope_low_freq_factor ({}) for llama3 "
                                    "scaling, got {}",
                                    s.low_freq_factor, s.high_freq_factor)};
  if (s.original_max_position <= 0)
    return ShapeProblem{{"rope_original_max_position_embeddings"},
                        fmt::format("model.rope_original_max_position_embeddings must be > 0 for llama3 scaling, got {}",
                                    s.original_max_position)};
  return std::nullopt;
}

// The parameter count in double: every size is bounded, so this cannot overflow, and it
// bounds every int64 product the model computes.
double parameters_in_double(const LlamaConfig& c) {
  const double C = double(c.hidden_size), F = double(c.intermediate_size), H = double(c.num_heads),
               KV = double(c.num_kv_heads), E = double(std::max<int64_t>(c.num_experts, 1));
  const double head = C / H;
  const double attn = C * (H + 2 * KV) * head + H * head * C;
  return 2 * double(c.vocab_size) * C + double(c.num_layers) * (attn + E * 3 * C * F + E * C + 2 * C) + C;
}

}  // namespace

std::optional<ShapeProblem> LlamaConfig::problem() const {
  if (Problem p = sizes_problem(*this)) return p;
  if (Problem p = heads_problem(*this)) return p;
  if (!(rope_theta > 0)) return ShapeProblem{{"rope_theta"}, fmt::format("model.rope_theta must be > 0, got {}", rope_theta)};
  if (!(norm_eps > 0)) return ShapeProblem{{"norm_eps"}, fmt::format("model.norm_eps must be > 0, got {}", norm_eps)};
  if (Problem p = routing_problem(*this)) return p;
  if (Problem p = rope_problem(rope_scaling)) return p;
  if (tensor_parallel != 1) {
    if (const auto why = tensor_parallel_problem(*this, tensor_parallel))
      return ShapeProblem{{"tensor_parallel"}, fmt::format("tensor_parallel {}", *why)};
  }
  if (expert_parallel != 1) {
    if (const auto why = expert_parallel_problem(*this, expert_parallel))
      return ShapeProblem{{"expert_parallel"}, fmt::format("expert_parallel {}", *why)};
  }
  if (const double n = parameters_in_double(*this); n > ShapeLimits::parameters)
    return ShapeProblem{{"hidden_size", "num_layers", "vocab_size", "intermediate_size"},
                        fmt::format("the model would have {:.3g} parameters, more than the {:.3g} this trainer takes "
                                    "(model.hidden_size {}, model.num_layers {}, model.vocab_size {}, "
                                    "model.intermediate_size {})",
                                    n, ShapeLimits::parameters, hidden_size, num_layers, vocab_size, intermediate_size)};
  return std::nullopt;
}

void LlamaConfig::validate() const {
  if (const auto p = problem()) FSDP_FAIL("{}", p->message);
}

std::string LlamaConfig::summary() const {
  const RopeScaling& s = rope_scaling;
  std::string rope;
  if (s.type == RopeScaling::Type::Linear) rope = fmt::format(" rope_scaling linear x{}", s.factor);
  if (s.type == RopeScaling::Type::Llama3)
    rope = fmt::format(" rope_scaling llama3 x{} (low {} high {} original {})", s.factor, s.low_freq_factor,
                       s.high_freq_factor, s.original_max_position);
  return fmt::format(
      "vocab {} hidden {} intermediate {} layers {} heads {} kv_heads {} head_dim {} max_seq_len {} rope_theta {}{} "
      "norm_eps {}{}{} ({:.2f}M parameters{})",
      vocab_size, hidden_size, intermediate_size, num_layers, num_heads, num_kv_heads, head_dim(), max_seq_len,
      rope_theta, rope, norm_eps, tie_word_embeddings ? " tied embeddings" : "",
      is_moe() ? fmt::format(" experts {} top-{} aux_coef {} z_coef {}", num_experts, experts_per_token,
                             router_aux_loss_coef, router_z_loss_coef)
               : "",
      double(num_parameters()) / 1e6,
      is_moe() ? fmt::format(", {:.2f}M active", double(num_active_parameters()) / 1e6) : "");
}

namespace {

// Published shapes: the config.json files of meta-llama/Llama-2-{7b,13b,70b}-hf,
// codellama/CodeLlama-7b-hf, meta-llama/Meta-Llama-3-{8B,70B}, meta-llama/Llama-3.1-{8B,70B}
// and mistralai/Mixtral-8x7B-v0.1 (router_aux_loss_coef 0.02 there; the transformers class
// default is 0.001). Fields in LlamaConfig's order: vocab, hidden, intermediate, layers,
// heads, kv heads, max_seq_len, rope_theta, norm_eps, then for a mixture of experts:
// experts, experts per token, aux and z loss coefficients, then RoPE scaling.
// Llama 3 and 3.1 differ only in the context: 3.1 stretches the 8192 positions of
// pretraining to 131072 with llama3 scaling (factor 8, low 1, high 4).
// tiny_moe is tiny with 8 experts of tiny's MLP width, top-2 (2x tiny's MLP FLOPs per
// token, 8x its MLP parameters); with experts of half that width (tiny's FLOPs) the demo's
// validation loss after 300 steps was 3.63, just above dense tiny's 3.61; at this width 3.58.
constexpr RopeScaling kLlama31Rope{RopeScaling::Type::Llama3, 8.0, 1.0, 4.0, 8192};

constexpr LlamaPreset kPresets[] = {
    {"tiny", {1024, 128, 352, 4, 4, 2, 512, 10000.0, 1e-5}},
    {"tiny_moe", {1024, 128, 352, 4, 4, 2, 512, 10000.0, 1e-5, 8, 2, 0.02, 0.0}},
    {"llama2_7b", {32000, 4096, 11008, 32, 32, 32, 4096, 10000.0, 1e-5}},
    {"llama2_13b", {32000, 5120, 13824, 40, 40, 40, 4096, 10000.0, 1e-5}},
    {"llama2_70b", {32000, 8192, 28672, 80, 64, 8, 4096, 10000.0, 1e-5}},
    {"codellama_7b", {32016, 4096, 11008, 32, 32, 32, 16384, 1000000.0, 1e-5}},
    {"mixtral_8x7b", {32000, 4096, 14336, 32, 32, 8, 32768, 1000000.0, 1e-5, 8, 2, 0.02, 0.0}},
    {"llama3_8b", {128256, 4096, 14336, 32, 32, 8, 8192, 500000.0, 1e-5}},
    {"llama3_70b", {128256, 8192, 28672, 80, 64, 8, 8192, 500000.0, 1e-5}},
    {"llama3.1_8b", {128256, 4096, 14336, 32, 32, 8, 131072, 500000.0, 1e-5, 0, 0, 0, 0, kLlama31Rope}},
    {"llama3.1_70b", {128256, 8192, 28672, 80, 64, 8, 131072, 500000.0, 1e-5, 0, 0, 0, 0, kLlama31Rope}},
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
