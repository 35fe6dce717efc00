// Tensor parallelism's rules over a model's shape; see tensor_parallel.h.
#include "fsdp/model/tensor_parallel.h"

#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace fsdp::model {

namespace {

struct Rule {
  const char* what;    // "model.num_kv_heads"
  int64_t size;        // what must be split evenly
  const char* reason;  // why it must be
};

std::vector<Rule> rules(const LlamaConfig& c, int64_t seq_len) {
  std::vector<Rule> r = {
      {"model.num_heads", c.num_heads, "each tensor rank computes whole attention heads"},
      {"model.num_kv_heads", c.num_kv_heads,
       "each tensor rank computes whole key/value heads, so a GQA group stays on one rank (as torchtitan requires)"},
      {"model.intermediate_size", c.intermediate_size,
       c.is_moe() ? "each expert's gate, up and down projections are split over the tensor ranks"
                  : "the MLP's gate, up and down projections are split over the tensor ranks"},
      {"model.vocab_size", c.vocab_size,
       "the embedding, the output head and the cross-entropy split the vocabulary evenly (no padding rows are "
       "added)"},
  };
  if (seq_len > 0)
    r.push_back({"train.seq_len", seq_len, "sequence parallelism splits each micro-batch's tokens over the tensor ranks"});
  return r;
}

}  // namespace

std::optional<std::string> tensor_parallel_problem(const LlamaConfig& c, int64_t tensor, int64_t seq_len) {
  if (tensor < 1) return fmt::format("must be >= 1, got {}", tensor);
  const std::vector<Rule> all = rules(c, seq_len);
  for (const Rule& r : all) {
    if (r.size % tensor == 0) continue;
    std::vector<int64_t> fit;
    for (int64_t d = 1; d <= 64; ++d) {
      bool ok = true;
      for (const Rule& q : all) ok = ok && q.size % d == 0;
      if (ok) fit.push_back(d);
    }
    return fmt::format("must divide {} ({}), got {}: {}; tensor degrees that fit this model: {}", r.what, r.size,
                       tensor, r.reason, fmt::join(fit, ", "));
  }
  return std::nullopt;
}

}  // namespace fsdp::model
