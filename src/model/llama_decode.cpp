// The decoder's forward with a KV cache; see the file-top comment of llama_decode.h. The
// blocks are the training decoder's (TransformerBlock::forward_cached), so generation and
// training cannot drift apart.
#include "fsdp/model/llama_decode.h"

#include "fsdp/model/rope_scaling.h"

namespace fsdp::model {

namespace {

const LlamaConfig& validated(const LlamaConfig& c) {
  c.validate();
  return c;
}

}  // namespace

LlamaDecoder::LlamaDecoder(const LlamaConfig& cfg, int64_t batch, int64_t max_len, int64_t max_chunk, DType dtype,
                           Device device)
    : cfg_(validated(cfg)),
      dtype_(dtype),
      device_(device),
      units_(llama_units(cfg_)),
      embedding_(units_[embedding_unit()]),
      head_(cfg_, units_),
      max_chunk_(max_chunk) {
  FSDP_CHECK(batch >= 1, "LlamaDecoder: batch must be >= 1, got {}", batch);
  FSDP_CHECK(max_len >= 1 && max_len <= cfg_.max_seq_len,
             "LlamaDecoder: max_len must be in [1, max_seq_len = {}], got {}", cfg_.max_seq_len, max_len);
  FSDP_CHECK(max_chunk >= 1 && max_chunk <= max_len, "LlamaDecoder: max_chunk must be in [1, max_len = {}], got {}",
             max_len, max_chunk);
  // Computed on the host, moved once (as in Llama's constructor); positions < max_len only.
  const RopeTables rope = llama_rope_tables(cfg_, max_len, device);
  if (cfg_.is_moe()) router_bias_ = std::make_shared<RouterBias>(cfg_.num_layers, cfg_.num_experts, device_);
  for (int l = 0; l < int(cfg_.num_layers); ++l)
    blocks_.emplace_back(cfg_, units_[block_unit(l)], rope, nullptr, RouterBiasRef{router_bias_, l});
  cache_ = KVCache(cfg_, batch, max_len, dtype, device);

  const int64_t N = batch * max_chunk, C = cfg_.hidden_size;
  x_ = Tensor::empty({N, C}, dtype, device);
  block_scratch_ = blocks_.front().make_inference_scratch(N, dtype, device);
  hf_ = Tensor::empty({N, C}, dtype, device);
  rstdf_ = Tensor::empty({N}, stat_dtype(dtype), device);
  logits_ = Tensor::empty({N, cfg_.vocab_size}, dtype, device);
}

Tensor LlamaDecoder::forward(const Tensor& ids, ParamProvider& p, bool all_rows) {
  const int64_t B = batch(), C = cfg_.hidden_size;
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

  const Tensor stream = x_.narrow(0, 0, N);
  p.before_forward(embedding_unit());
  embedding_.forward(ids.reshape({N}), p.forward_view(embedding_unit()), stream);
  p.after_forward(embedding_unit());
  for (int l = 0; l < int(cfg_.num_layers); ++l) {
    p.before_forward(block_unit(l));
    blocks_[size_t(l)].forward_cached(stream, p.forward_view(block_unit(l)), block_scratch_, cache_, l, B, T);
    p.after_forward(block_unit(l));
  }

  // The head on every row, or on each sequence's last row only: [B, C] rows T*C apart.
  const Tensor x = all_rows ? stream : stream.reshape({B, T, C}).select(1, T - 1);
  const int64_t rows = x.size(0);
  const int hu = head_unit(cfg_), wu = head_.weight_unit();
  head_.before_forward(p);
  const Tensor logits = logits_.narrow(0, 0, rows);
  head_.forward(x, p.forward_view(hu), p.forward_view(wu), hf_.narrow(0, 0, rows), rstdf_.narrow(0, 0, rows), logits);
  head_.after_forward(p);
  p.finish();
  cache_.length += T;
  return logits;
}

}  // namespace fsdp::model
