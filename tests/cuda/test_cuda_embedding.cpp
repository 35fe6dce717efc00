// CUDA embedding against the CPU: the forward gathers bit-exact rows; the backward adds
// rows of dout into dtable in the CPU's order (row n = 0..N-1 per element), so float32
// and float64 match bitwise even with repeated ids; bfloat16 and float16 (no CPU version)
// match a host loop that rounds after every addition, as the kernel does. Bad ids give the CPU's
// error and leave the output untouched.
#include <gtest/gtest.h>

#include <random>

#include "cuda_test_util.h"
#include "fsdp/ops/embedding.h"

namespace fsdp::test {
namespace {

Tensor random_ids(int64_t n, int64_t vocab, DType t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tensor ids = Tensor::empty({n}, t);
  for (int64_t i = 0; i < n; ++i) ids.set_flat(i, double(rng() % uint64_t(vocab)));
  return ids;
}

TEST_F(CudaOps, EmbeddingMatchesCpu) {
  for (DType t : kFloatTypes)
    for (DType id_t : {DType::I32, DType::I64})
      for (int64_t vocab : {int64_t(1), int64_t(50)})
        for (int64_t c : {int64_t(1), int64_t(7), int64_t(300)})
          for (int64_t n : {int64_t(1), int64_t(33), int64_t(100)}) {
            const uint64_t seed = uint64_t(vocab * 100000 + c * 1000 + n);
            const Tensor ids = random_ids(n, vocab, id_t, seed);
            const Tensor table = random_tensor({vocab, c + 3}, DType::F64, seed + 1, -2, 2).to(t).narrow(1, 1, c);
            const Tensor dout = random_tensor({n, c}, DType::F64, seed + 2, -2, 2).to(t);
            const Tensor dtable0 = random_tensor({vocab, c}, DType::F64, seed + 3, -2, 2).to(t);
            const std::string what = std::string(dtype_name(t)) + "/" + dtype_name(id_t) + " V=" +
                                     std::to_string(vocab) + " C=" + std::to_string(c) + " N=" + std::to_string(n);
            // Forward: exact rows.
            Tensor want = Tensor::empty({n, c}, t);
            for (int64_t i = 0; i < n; ++i)
              for (int64_t j = 0; j < c; ++j) want.set({i, j}, table.get({int64_t(ids.get_flat(i)), j}));
            const Tensor gids = on_gpu(ids);
            Tensor gout = Tensor::empty({n, c}, t, kGpu);
            embedding_forward(gids, on_gpu(table.clone()).narrow(1, 0, c), gout);
            EXPECT_TRUE(identical(on_cpu(gout), want)) << what;
            // Backward: the CPU op where it exists, else the same order with a rounding per add.
            Tensor dtable = dtable0.clone();
            if (t == DType::BF16 || t == DType::F16) {
              for (int64_t i = 0; i < n; ++i)
                for (int64_t j = 0; j < c; ++j) {
                  const int64_t v = int64_t(ids.get_flat(i));
                  dtable.set({v, j}, double(float(dtable.get({v, j})) + float(dout.get({i, j}))));
                }
            } else {
              embedding_backward(ids, dout, dtable);
            }
            Tensor gdtable = on_gpu(dtable0);
            embedding_backward(gids, on_gpu(dout), gdtable);
            EXPECT_TRUE(identical(on_cpu(gdtable), dtable)) << what;
          }
}

TEST_F(CudaOps, EmbeddingRefusesIdsOutsideTheVocabulary) {
  Tensor ids = random_ids(10, 50, DType::I64, 1);
  ids.set_flat(3, 50);
  ids.set_flat(7, -1);
  const Tensor table = on_gpu(random_tensor({50, 4}, DType::F32, 2));
  Tensor out = on_gpu(Tensor::zeros({10, 4}, DType::F32));
  expect_error([&] { embedding_forward(on_gpu(ids), table, out); },
               {"token id 50 at position 3 is outside the vocabulary [0, 50)"});
  EXPECT_TRUE(identical(on_cpu(out), Tensor::zeros({10, 4}, DType::F32)));
  Tensor dtable = on_gpu(Tensor::zeros({50, 4}, DType::F32));
  expect_error([&] { embedding_backward(on_gpu(ids), on_gpu(Tensor::zeros({10, 4}, DType::F32)), dtable); },
               {"token id 50 at position 3"});
}

}  // namespace
}  // namespace fsdp::test
