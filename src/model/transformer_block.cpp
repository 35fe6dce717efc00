// A transformer block as its two sublayers; see transformer_block.h.
#include "fsdp/model/transformer_block.h"

namespace fsdp::model {

TransformerBlock::TransformerBlock(const LlamaConfig& cfg, const UnitLayout& block, const RopeTables& rope,
                                   const SequenceParallel* sp, RouterBiasRef bias, const ExpertDispatch* ep,
                                   const UnitLayout* experts)
    : cfg_(cfg), attention_(cfg, block, rope, sp), mlp_(make_mlp(cfg, block, sp, std::move(bias), ep, experts)) {}

// The residual stream's tensors hold this tensor rank's rows (Note [Sequence parallelism]).
void BlockActivations::bind(const LlamaConfig& cfg, int64_t B, int64_t T, DType dt, const SavedBinder& b) {
  attn.bind(cfg, B, T, dt, b);
  b(x2, {"block x2", {B * T / cfg.tensor_parallel, cfg.hidden_size}, dt, SavedKind::Expensive});
  if (!mlp) mlp = new_mlp_saved(cfg);
  mlp->bind(cfg, B * T, dt, b);
}

void BlockGrads::bind(const LlamaConfig& cfg, int64_t N, DType dt, const SavedBinder& b) {
  const int64_t rows = N / cfg.tensor_parallel;
  b(dres, {"block dres", {rows, cfg.hidden_size}, dt, SavedKind::Cheap});
  b(dh, {"block dh", {rows, cfg.hidden_size}, dt, SavedKind::Cheap});
  attn.bind(cfg, N, dt, b);
  if (!mlp) mlp = new_mlp_grads(cfg);
  mlp->bind(cfg, N, dt, b);
}

BlockActivations TransformerBlock::make_activations(int64_t B, int64_t T, DType dt, Device dev) const {
  BlockActivations a;
  a.bind(cfg_, B, T, dt, allocate_on(dev));
  return a;
}

BlockActivations TransformerBlock::make_inference_scratch(int64_t rows, DType dt, Device dev) const {
  BlockActivations a;
  a.attn = AttentionSaved(cfg_, 1, rows, dt, dev, /*with_lse=*/false);
  a.mlp = mlp_->make_saved(rows, dt, dev);
  return a;
}

BlockGrads TransformerBlock::make_grads(int64_t N, DType dt, Device dev) const {
  BlockGrads g;
  g.bind(cfg_, N, dt, allocate_on(dev));
  return g;
}

void TransformerBlock::forward(const Tensor& x, const UnitParams& p, BlockActivations& a, const Tensor& out,
                               int64_t B, int64_t T, const Tensor& doc_start) const {
  attention_.forward(x, p, a.attn, a.x2, B, T, doc_start);
  mlp_->forward(a.x2, p, *a.mlp, out);
}

void TransformerBlock::recompute(const Tensor& x, const UnitParams& p, BlockActivations& a, const Tensor& out,
                                 Recompute mode, int64_t B, int64_t T, const Tensor& doc_start) const {
  switch (mode) {
    case Recompute::None: return;
    case Recompute::Full: forward(x, p, a, out, B, T, doc_start); return;
    case Recompute::Selective:
      attention_.recompute_cheap(x, p, a.attn);
      mlp_->recompute_cheap(a.x2, p, *a.mlp);
      return;
  }
}

void TransformerBlock::backward(const Tensor& x, const BlockActivations& a, const UnitParams& p, BlockGrads& g,
                                int64_t B, int64_t T, const Tensor& doc_start) const {
  mlp_->backward(a.x2, *a.mlp, p, g.dres, g.dh, *g.mlp);
  attention_.backward(x, a.attn, p, g.dres, g.dh, g.attn, B, T, doc_start);
}

void TransformerBlock::forward_cached(const Tensor& x, const UnitParams& p, BlockActivations& scratch,
                                      const KVCache& cache, int layer, int64_t B, int64_t T) const {
  attention_.forward_cached(x, p, scratch.attn, cache, layer, B, T);
  mlp_->forward(x, p, *scratch.mlp, x);
}

}  // namespace fsdp::model
