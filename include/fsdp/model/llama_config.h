// Llama 2 shapes: the hyper-parameters Hugging Face's LlamaConfig carries, the published
// presets, and the arithmetic other layers need (parameter counts, FLOPs per token).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fsdp::model {

// Upper bounds of a shape, far above any published model (Llama 3.1 405B: hidden 16384,
// 126 layers, 128 heads, vocabulary 128256; Mixtral 8x22B: 8 experts; the longest
// contexts: 10M tokens) and low enough that no product of them overflows int64: a typo or
// a corrupt config.json (vocab_size 2^40) is refused before anything is allocated. Whether
// a sane shape fits the machine is the memory plan's to say.
struct ShapeLimits {
  static constexpr int64_t vocab_size = int64_t(1) << 24;
  static constexpr int64_t hidden_size = int64_t(1) << 18;
  static constexpr int64_t intermediate_size = int64_t(1) << 20;
  static constexpr int64_t num_layers = int64_t(1) << 12;
  static constexpr int64_t num_heads = int64_t(1) << 12;  // and num_kv_heads
  static constexpr int64_t max_seq_len = int64_t(1) << 24;
  static constexpr int64_t num_experts = int64_t(1) << 12;
  static constexpr double parameters = 0x1p44;  // 1.8e13: 70 TB of fp32 master weights alone
};

// What is wrong with a shape: the model.* keys involved (a config error blames the one
// set last) and one line naming them.
struct ShapeProblem {
  std::vector<std::string_view> keys;  // e.g. {"hidden_size", "num_heads"}
  std::string message;                 // "model.hidden_size (100) must be divisible by model.num_heads (3)"
};

// RoPE frequency scaling, to run past the context the model was pretrained on
// (transformers' config.json `rope_scaling`): `linear` divides every frequency by factor
// (position interpolation: positions p and p * factor look alike); `llama3` (Llama 3.1,
// 3.2) divides only the low frequencies by factor, keeps the high ones and blends in
// between. The tables themselves: rope_scaling.h.
struct RopeScaling {
  enum class Type { None, Linear, Llama3 };
  Type type = Type::None;
  double factor = 1.0;
  double low_freq_factor = 1.0;                // llama3: wavelengths above original / low are divided
  double high_freq_factor = 4.0;               // llama3: wavelengths below original / high are kept
  int64_t original_max_position = 8192;        // llama3: the pretraining context
  bool operator==(const RopeScaling&) const = default;
};

struct LlamaConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;        // C
  int64_t intermediate_size = 0;  // F (SwiGLU width)
  int64_t num_layers = 0;
  int64_t num_heads = 0;     // H
  int64_t num_kv_heads = 0;  // KVH, divides H (GQA); == H is plain multi-head attention
  int64_t max_seq_len = 0;
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  // Sparse mixture of experts (Mixtral): every block's MLP is num_experts SwiGLU experts of
  // width intermediate_size, experts_per_token of them chosen per token by a router.
  // num_experts == 0 is Llama's dense MLP.
  int64_t num_experts = 0;          // E
  int64_t experts_per_token = 0;    // k (top-k)
  double router_aux_loss_coef = 0;  // weight of transformers' load-balancing loss
  double router_z_loss_coef = 0;    // weight of the ST-MoE router z-loss, mean logsumexp(logits)^2
  RopeScaling rope_scaling = {};
  // The output head reads the embedding table (logits = h E^T) instead of a weight of its
  // own (Hugging Face's tie_word_embeddings; Llama 3.2 1B/3B). param_units.h: the head
  // unit then holds only the final norm.
  bool tie_word_embeddings = false;
  // Tensor parallelism (model/tensor_parallel.h): the ranks each block's matrices, the
  // vocabulary and each micro-batch's tokens are split over. Not a shape: the fields above
  // stay the whole model's, and the local_* accessors are the share one tensor rank
  // computes (1: all of it).
  int64_t tensor_parallel = 1;
  // Expert parallelism (model/expert_parallel.h): the ranks each MoE layer's experts are
  // split over, num_experts / expert_parallel whole experts each. Not a shape either.
  int64_t expert_parallel = 1;
  // A mixture of experts' capacity factor (model/moe_capacity.h): 0 = dropless. Not a shape.
  double capacity_factor = 0;

  bool is_moe() const { return num_experts > 0; }
  // This expert rank's experts: [local_expert_begin(r), + local_experts()).
  int64_t local_experts() const { return num_experts / expert_parallel; }
  bool expert_units() const { return is_moe() && expert_parallel > 1; }

  int64_t head_dim() const { return hidden_size / num_heads; }
  int64_t q_dim() const { return num_heads * head_dim(); }
  int64_t kv_dim() const { return num_kv_heads * head_dim(); }
  int64_t qkv_dim() const { return q_dim() + 2 * kv_dim(); }

  int64_t local_heads() const { return num_heads / tensor_parallel; }
  int64_t local_kv_heads() const { return num_kv_heads / tensor_parallel; }
  int64_t local_q_dim() const { return q_dim() / tensor_parallel; }
  int64_t local_kv_dim() const { return kv_dim() / tensor_parallel; }
  int64_t local_qkv_dim() const { return qkv_dim() / tensor_parallel; }
  int64_t local_intermediate() const { return intermediate_size / tensor_parallel; }
  int64_t local_vocab() const { return vocab_size / tensor_parallel; }

  int64_t num_parameters() const;
  // Parameters one token's forward touches: all but the experts it was not routed to.
  int64_t num_active_parameters() const;
  // Training FLOPs per token (forward + backward = 3x forward), counting GEMMs at
  // 2 FLOPs per multiply-add and the attention score/value products for a causal mask.
  double train_flops_per_token(int64_t seq_len) const;
  // The first problem of this shape (a size out of [1, its ShapeLimits bound], heads that
  // do not divide, an odd head dim, too many parameters, a tensor_parallel that does not
  // divide the heads, ...); nullopt when it is valid.
  std::optional<ShapeProblem> problem() const;
  // Throws fsdp::Error with problem()'s message.
  void validate() const;
  std::string summary() const;
};

struct LlamaPreset {
  std::string_view name;
  LlamaConfig config;
};

// The one table of presets: tiny, tiny_moe, llama2_7b, llama2_13b, llama2_70b, codellama_7b,
// mixtral_8x7b, llama3_8b, llama3_70b, llama3.1_8b, llama3.1_70b, in the order help and errors list them. model.preset's schema row and llama_preset read it.
std::span<const LlamaPreset> llama_presets();
std::vector<std::string_view> llama_preset_names();
// The named preset's shape; an unknown name is an error listing the known ones.
LlamaConfig llama_preset(const std::string& name);

}  // namespace fsdp::model
