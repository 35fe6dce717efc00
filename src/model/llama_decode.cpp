// Llama forward with a KV cache; see the file-top comment of llama_decode.h for the math.
// Mirrors Llama::block_forward (llama.cpp) op for op, with two differences: RoPE runs at
// the cache's position and attention reads the cache (attention_decode) instead of the
// chunk's own keys; the residual stream is updated in place, since nothing is saved for a
// backward pass.
#include "fsdp/model/llama_decode.h"

#include "fsdp/ops/attention_decode.h"
#include "fsdp/ops/embedding.h"
#include "fsdp/ops/matmul.h"
#include "fsdp/ops/rmsnorm.h"
#include "fsdp/ops/rope.h"
#include "fsdp/ops/swiglu.h"

namespace fsdp::model {

LlamaDecoder::LlamaDecoder(const LlamaConfig& cfg, int64_t batch, int64_t max_len, int64_t max_chunk, DType dtype,
                           Device device)
    : cfg_(cfg), dtype_(dtype), device_(device), units_(llama_units(cfg)), max_chunk_(max_chunk) {
  cfg_.validate();
  FSDP_CHECK(batch >= 1, "LlamaDecoder: batch must be >= 1, got {}", batch);
  FSDP_CHECK(max_len >= 1 && max_len <= cfg_.max_seq_len,
             "LlamaDecoder: max_len must be in [1, max_seq_len = {}], got {}", cfg_.max_seq_len, max_len);
  FSDP_CHECK(max_chunk >= 1 && max_chunk <= max_len, "LlamaDecoder: max_chunk must be in [1, max_len = {}], got {}",
             max_len, max_chunk);
  for (int l = 0; l < int(cfg_.num_layers); ++l) {
    const UnitLayout& u = units_[block_unit(l)];
    const std::string p = u.name + ".";
    // The fused q|k|v and gate|up GEMMs rely on the adjacency param_units.cpp guarantees
    // (Llama's constructor checks it for the same layout).
    blocks_.push_back(Llama::BlockOffsets{u.slot(p + "wq").offset, u.slot(p + "wo").offset,
                                          u.slot(p + "w_gate").offset, u.slot(p + "w_down").offset,
                                          u.slot(p + "attn_norm").offset, u.slot(p + "mlp_norm").offset});
  }
  const UnitLayout& h = units_[head_unit(cfg_)];
  head_lm_ = h.slot("lm_head").offset;
  head_norm_ = h.slot("norm").offset;
  // Computed on the host, moved once (as in Llama's constructor).
  rope_ = make_rope_tables(max_len, cfg_.head_dim(), cfg_.rope_theta, Device::cpu());
  if (!device.is_cpu()) rope_ = RopeTables{rope_.cos.to(device), rope_.sin.to(device)};
  cache_ = KVCache(cfg_, batch, max_len, dtype, device);

  const int64_t N = batch * max_chunk, C = cfg_.hidden_size, F = cfg_.intermediate_size;
  const DType stat = dtype == DType::F64 ? DType::F64 : DType::F32;
  s_.x = Tensor::empty({N, C}, dtype, device);
  s_.h = Tensor::empty({N, C}, dtype, device);
  s_.rstd = Tensor::empty({N}, stat, device);
  s_.qkv = Tensor::empty({N, cfg_.qkv_dim()}, dtype, device);
  s_.att = Tensor::empty({N, cfg_.q_dim()}, dtype, device);
  s_.gu = Tensor::empty({N, 2 * F}, dtype, device);
  s_.act = Tensor::empty({N, F}, dtype, device);
  s_.hf = Tensor::empty({N, C}, dtype, device);
  s_.rstdf = Tensor::empty({N}, stat, device);
  s_.logits = Tensor::empty({N, cfg_.vocab_size}, dtype, device);
}

void LlamaDecoder::block_forward(int layer, const Tensor& flat, int64_t T) {
  const LlamaConfig& c = cfg_;
  const int64_t B = batch(), N = B * T, C = c.hidden_size, F = c.intermediate_size, D = c.head_dim();
  const Llama::BlockOffsets& o = blocks_[size_t(layer)];
  const Tensor wqkv = flat.narrow(0, o.wq, c.qkv_dim() * C).reshape({c.qkv_dim(), C});
  const Tensor wo = flat.narrow(0, o.wo, C * c.q_dim()).reshape({C, c.q_dim()});
  const Tensor wgu = flat.narrow(0, o.w_gate, 2 * F * C).reshape({2 * F, C});
  const Tensor wdown = flat.narrow(0, o.w_down, C * F).reshape({C, F});
  const Tensor x = s_.x.narrow(0, 0, N), h = s_.h.narrow(0, 0, N), rstd = s_.rstd.narrow(0, 0, N);
  const Tensor qkv = s_.qkv.narrow(0, 0, N), att = s_.att.narrow(0, 0, N);
  const Tensor gu = s_.gu.narrow(0, 0, N), act = s_.act.narrow(0, 0, N);

  rmsnorm_forward(x, flat.narrow(0, o.attn_norm, C), h, rstd, c.norm_eps);
  matmul(h, wqkv, qkv, false, true);
  const Tensor q3 = qkv.reshape({B, T, c.qkv_dim()});
  const Tensor q = q3.narrow(2, 0, c.q_dim()).unflatten(2, c.num_heads, D);
  const Tensor k = q3.narrow(2, c.q_dim(), c.kv_dim()).unflatten(2, c.num_kv_heads, D);
  const Tensor v = q3.narrow(2, c.q_dim() + c.kv_dim(), c.kv_dim()).unflatten(2, c.num_kv_heads, D);
  const int64_t pos = cache_.length;
  rope_forward(q, q, rope_, pos);
  rope_forward(k, k, rope_, pos);
  attention_decode(q, k, v, cache_.layer_k(layer), cache_.layer_v(layer), pos,
                   att.reshape({B, T, c.num_heads, D}));
  matmul(att, wo, x, false, true, 1.0, 1.0);  // x += att @ Wo^T

  rmsnorm_forward(x, flat.narrow(0, o.mlp_norm, C), h, rstd, c.norm_eps);
  matmul(h, wgu, gu, false, true);
  swiglu_forward(gu.narrow(1, 0, F), gu.narrow(1, F, F), act);
  matmul(act, wdown, x, false, true, 1.0, 1.0);  // x += act @ Wdown^T
}

Tensor LlamaDecoder::forward(const Tensor& ids, ParamProvider& p, bool all_rows) {
  const int64_t B = batch(), C = cfg_.hidden_size, V = cfg_.vocab_size;
  check_dtype(ids, DType::I32, "ids");
  check_dim(ids, 2, "ids");
  check_contiguous(ids, "ids");
  FSDP_CHECK(ids.size(0) == B, "LlamaDecoder: ids has {} sequences, the decoder was built for batch {}", ids.size(0),
             B);
  const int64_t T = ids.size(1);
  FSDP_CHECK(T >= 1 && T <= max_chunk_, "LlamaDecoder: {} tokens per sequence in one call, expected 1 .. {}", T,
             max_chunk_);
  FSDP_CHECK(cache_.length + T <= max_len(),
             "LlamaDecoder: {} cached + {} new tokens exceed the cache's {} positions", cache_.length, T, max_len());
  const int64_t N = B * T;

  p.before_forward(embedding_unit());
  embedding_forward(ids.reshape({N}), p.params(embedding_unit()).narrow(0, 0, V * C).reshape({V, C}),
                    s_.x.narrow(0, 0, N));
  p.after_forward(embedding_unit());
  for (int l = 0; l < int(cfg_.num_layers); ++l) {
    p.before_forward(block_unit(l));
    block_forward(l, p.params(block_unit(l)), T);
    p.after_forward(block_unit(l));
  }

  // The head on every row, or on each sequence's last row only: [B, C] rows T*C apart.
  const Tensor x = all_rows ? s_.x.narrow(0, 0, N) : s_.x.narrow(0, 0, N).reshape({B, T, C}).select(1, T - 1);
  const int64_t rows = x.size(0);
  const int hu = head_unit(cfg_);
  p.before_forward(hu);
  const Tensor flat = p.params(hu);
  rmsnorm_forward(x, flat.narrow(0, head_norm_, C), s_.hf.narrow(0, 0, rows), s_.rstdf.narrow(0, 0, rows),
                  cfg_.norm_eps);
  const Tensor logits = s_.logits.narrow(0, 0, rows);
  matmul(s_.hf.narrow(0, 0, rows), flat.narrow(0, head_lm_, V * C).reshape({V, C}), logits, false, true);
  p.after_forward(hu);
  p.finish();
  cache_.length += T;
  return logits;
}

}  // namespace fsdp::model
