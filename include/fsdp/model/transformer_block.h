// A transformer block: the attention sublayer, then the MLP sublayer, each adding into the
// residual stream:
//
//   x2  = x + attention(x)        (attention_block.h)
//   out = x2 + mlp(x2)            (mlp.h: dense SwiGLU, or a sparse MoE)
//
// BlockActivations holds what one block's forward saves for its backward; BlockGrads the
// backward scratch every block shares. forward reads only its input and the unit's
// parameters and writes only its BlockActivations and its output, so activation
// checkpointing is "run forward again into the activations, then backward" (full), or
// "run the Cheap parts again from the kept Expensive ones, then backward" (selective):
// recompute(), with no special case in the sublayers' forward or backward.
#pragma once

#include <cstdint>
#include <memory>

#include "fsdp/model/attention_block.h"
#include "fsdp/model/mlp.h"

namespace fsdp::model {

// Activation checkpointing's modes (decoder.h's ActivationCheckpointing says which blocks).
enum class Recompute {
  None,       // keep every saved tensor
  Full,       // keep only the block's input; run its whole forward again in backward
  Selective,  // keep the Expensive saved tensors too; run only the Cheap ops again
};

struct BlockActivations {
  AttentionSaved attn;
  // [N, C] the residual stream between the sublayers (the MLP's input): x + att Wo^T, the
  // o projection's GEMM output (the residual add is folded into its beta), so Expensive.
  Tensor x2;
  std::unique_ptr<MlpSaved> mlp;

  // Each saved tensor to `bind`, in member order (Note [Saved tensors]); creates the MLP's
  // struct for cfg's kind when there is none.
  void bind(const LlamaConfig& cfg, int64_t batch, int64_t seq_len, DType dtype, const SavedBinder& bind);
};

struct BlockGrads {
  Tensor dres;  // [N, C] dL/d(residual stream): in = d(block output), out = d(block input)
  Tensor dh;    // [N, C] dL/d(a sublayer's normed input)
  AttentionGrads attn;
  std::unique_ptr<MlpGrads> mlp;

  void bind(const LlamaConfig& cfg, int64_t rows, DType dtype, const SavedBinder& bind);
};

class TransformerBlock {
 public:
  // `block` is the block's unit layout (param_units.h); rope the model's RoPE tables; sp
  // the model's sequence parallelism under tensor parallelism (null: none); bias the
  // block's row of the model's routing biases (a mixture of experts); ep the model's expert
  // dispatch and `experts` the block's expert unit, under expert parallelism (null: none).
  TransformerBlock(const LlamaConfig& cfg, const UnitLayout& block, const RopeTables& rope,
                   const SequenceParallel* sp = nullptr, RouterBiasRef bias = {}, const ExpertDispatch* ep = nullptr,
                   const UnitLayout* experts = nullptr);

  // Buffers for B sequences of T tokens (training) or for up to `rows` rows (inference
  // scratch: no log-sum-exp is kept).
  BlockActivations make_activations(int64_t B, int64_t T, DType dtype, Device device) const;
  BlockActivations make_inference_scratch(int64_t rows, DType dtype, Device device) const;
  BlockGrads make_grads(int64_t rows, DType dtype, Device device) const;

  // out = block(x) over B sequences of T tokens; x, out: [B*T, C] (this tensor rank's
  // B*T / tensor_parallel rows under tensor parallelism), distinct. doc_start: the rows'
  // documents (int32 [B, T], Note [Document masking] in fsdp/ops/attention.h), or undefined.
  void forward(const Tensor& x, const UnitParams& p, BlockActivations& a, const Tensor& out, int64_t B, int64_t T,
               const Tensor& doc_start = Tensor()) const;
  // A checkpointed block's activations again, right before its backward: Full runs
  // forward (writing `out` again, the same bits); Selective recomputes the Cheap tensors
  // from x and the kept Expensive ones (out untouched).
  void recompute(const Tensor& x, const UnitParams& p, BlockActivations& a, const Tensor& out, Recompute mode,
                 int64_t B, int64_t T, const Tensor& doc_start = Tensor()) const;
  // On entry g.dres holds dL/d(block output); on exit dL/d(block input). Parameter
  // gradients are added into p.grads, the unit's flat gradient buffer.
  void backward(const Tensor& x, const BlockActivations& a, const UnitParams& p, BlockGrads& g, int64_t B,
                int64_t T, const Tensor& doc_start = Tensor()) const;
  // Inference: x = block(x) in place for T new tokens per sequence, attending to layer
  // `layer` of the KV cache (see AttentionSublayer::forward_cached).
  void forward_cached(const Tensor& x, const UnitParams& p, BlockActivations& scratch, const KVCache& cache,
                      int layer, int64_t B, int64_t T) const;

 private:
  LlamaConfig cfg_;
  AttentionSublayer attention_;
  std::unique_ptr<MlpSublayer> mlp_;
};

}  // namespace fsdp::model
