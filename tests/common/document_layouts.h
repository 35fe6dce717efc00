// Document layouts for the document-masking tests (Note [Document masking] in
// fsdp/ops/attention.h): rows of T tokens cut into documents, drawn from a seed or given,
// as offsets per row (what the packer produces) and as the op's doc_start tensor.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "fsdp/ops/attention.h"

namespace fsdp::test {

// starts[b]: row b's document start offsets, the first 0, increasing, all < T.
struct DocumentLayout {
  int64_t T = 0;
  std::vector<std::vector<int32_t>> starts;

  Tensor doc_start() const {
    std::vector<int32_t> flat;
    std::vector<int64_t> first{0};
    for (const auto& row : starts) {
      flat.insert(flat.end(), row.begin(), row.end());
      first.push_back(int64_t(flat.size()));
    }
    return make_doc_start(flat, first, T);
  }
  // The document of token t of row b (its index among the row's documents).
  int64_t document_of(int64_t b, int64_t t) const {
    int64_t d = 0;
    while (d + 1 < int64_t(starts[size_t(b)].size()) && starts[size_t(b)][size_t(d) + 1] <= t) ++d;
    return d;
  }
};

// B rows of T tokens; each row cut where a seeded coin with probability `p_cut` says (so
// 0 gives one document filling the row, 1 a document per token).
inline DocumentLayout random_layout(int64_t B, int64_t T, double p_cut, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution cut(p_cut);
  DocumentLayout l;
  l.T = T;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int32_t> row{0};
    for (int64_t t = 1; t < T; ++t)
      if (cut(rng)) row.push_back(int32_t(t));
    l.starts.push_back(row);
  }
  return l;
}

}  // namespace fsdp::test
