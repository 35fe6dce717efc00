// CUDA embedding against the CPU: the forward gathers bit-exact rows; the backward adds
// rows of dout into dtable in the CPU's order (row n = 0..N-1 per element), so float32
// and float64 match bitwise even with repeated ids; bfloat16 and float16 (no CPU version)
// match a host loop that rounds after every addition, as the kernel does. Ids are
// checked on the device without a wait of the host: a bad id is the CPU's error (op,
// position, id, vocabulary) at the next read-back, its row skipped.
// The vocabulary-parallel variants (embedding_shard_*, tensor parallelism) are held to the
// CPU's shard ops the same way, on every shard of 1, 3 and 4, with ids at every shard
// boundary and ids of other shards (zero rows, nothing added), and a rerun of the
// backward gives the same bits.
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

// Ids for a vocabulary of `vocab` split in `shards`: each shard's first and last row and
// their neighbours outside it, then random ids (repeated: N > vocab).
Tensor boundary_ids(int64_t n, int64_t vocab, int64_t shards, DType t, uint64_t seed) {
  Tensor ids = random_ids(n, vocab, t, seed);
  int64_t i = 0;
  for (int64_t s = 0; s < shards; ++s) {
    const int64_t begin = s * (vocab / shards), end = begin + vocab / shards;
    for (int64_t id : {begin - 1, begin, end - 1, end})
      if (id >= 0 && id < vocab && i < n) ids.set_flat(i++, double(id));
  }
  return ids;
}

TEST_F(CudaOps, EmbeddingShardMatchesCpu) {
  constexpr int64_t kVocab = 12;
  for (DType t : kFloatTypes)
    for (DType id_t : {DType::I32, DType::I64})
      for (int64_t shards : {int64_t(1), int64_t(3), int64_t(4)})
        for (int64_t c : {int64_t(1), int64_t(7), int64_t(300)})
          for (int64_t n : {int64_t(17), int64_t(100)}) {
            if (id_t == DType::I32 && t != DType::F32) continue;  // index width is dtype-independent
            const int64_t rows = kVocab / shards;
            const uint64_t seed = uint64_t(shards * 100000 + c * 1000 + n);
            const Tensor ids = boundary_ids(n, kVocab, shards, id_t, seed);
            const Tensor gids = on_gpu(ids);
            const Tensor dout = random_tensor({n, c}, DType::F64, seed + 2, -2, 2).to(t);
            const Tensor gdout = on_gpu(dout);
            for (int64_t s = 0; s < shards; ++s) {
              const int64_t begin = s * rows;
              const std::string what = std::string(dtype_name(t)) + "/" + dtype_name(id_t) + " shard " +
                                       std::to_string(s) + " of " + std::to_string(shards) + " C=" + std::to_string(c) +
                                       " N=" + std::to_string(n);
              const Tensor table =
                  random_tensor({rows, c + 3}, DType::F64, seed + 10 + uint64_t(s), -2, 2).to(t).narrow(1, 1, c);
              const Tensor dtable0 = random_tensor({rows, c}, DType::F64, seed + 20 + uint64_t(s), -2, 2).to(t);
              // Forward: exact rows of this shard, zeros for the others' ids (the CPU op in
              // float32 on the exact upcast table for the 16-bit types: a copy is exact).
              const DType rt = t == DType::F64 ? DType::F64 : DType::F32;
              Tensor want = Tensor::empty({n, c}, rt);
              embedding_shard_forward(ids, table.to(rt), want, begin, kVocab);
              Tensor gout = Tensor::empty({n, c}, t, kGpu);
              embedding_shard_forward(gids, on_gpu(table.clone()).narrow(1, 0, c), gout, begin, kVocab);
              EXPECT_TRUE(identical(on_cpu(gout), want.to(t))) << what;
              // Backward: the CPU op where it exists, else its order with a rounding per add.
              Tensor dtable = dtable0.clone();
              if (t == DType::BF16 || t == DType::F16) {
                for (int64_t i = 0; i < n; ++i)
                  for (int64_t j = 0; j < c; ++j) {
                    const int64_t row = int64_t(ids.get_flat(i)) - begin;
                    if (row < 0 || row >= rows) continue;
                    dtable.set({row, j}, double(float(dtable.get({row, j})) + float(dout.get({i, j}))));
                  }
              } else {
                embedding_shard_backward(ids, dout, dtable, begin, kVocab);
              }
              Tensor gdtable = on_gpu(dtable0);
              embedding_shard_backward(gids, gdout, gdtable, begin, kVocab);
              const Tensor got = on_cpu(gdtable);
              EXPECT_TRUE(identical(got, dtable)) << what;
              Tensor again = on_gpu(dtable0);  // deterministic: a rerun gives the same bits
              embedding_shard_backward(gids, gdout, again, begin, kVocab);
              EXPECT_TRUE(identical(on_cpu(again), got)) << what << ": rerun";
            }
          }
}

// An id outside the whole vocabulary is the shard op's error at the next read-back, its
// row skipped; an id of another shard is no error.
TEST_F(CudaOps, EmbeddingShardReportsIdsOutsideTheVocabulary) {
  Tensor ids = random_ids(10, 12, DType::I64, 7);
  ids.set_flat(5, 12);
  const Tensor table = random_tensor({4, 3}, DType::F32, 8);  // rows [4, 8) of 12
  Tensor out = Tensor::empty({10, 3}, DType::F32, kGpu);
  embedding_shard_forward(on_gpu(ids), on_gpu(table), out, 4, 12);
  expect_error([&] { (void)on_cpu(out); },
               {"embedding_shard_forward", "token id 12 at position 5 is outside the vocabulary [0, 12)", "cuda:0"});
  ids.set_flat(5, 0);
  Tensor want = Tensor::empty({10, 3}, DType::F32);
  embedding_shard_forward(ids, table, want, 4, 12);
  const Tensor got = on_cpu(out);
  for (int64_t i = 0; i < 10; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(got.get({i, j}), want.get({i, j})) << i << "," << j;  // row 5: zeros

  ids.set_flat(2, -3);
  Tensor dtable = on_gpu(Tensor::zeros({4, 3}, DType::F32));
  embedding_shard_backward(on_gpu(ids), on_gpu(random_tensor({10, 3}, DType::F32, 9)), dtable, 4, 12);
  expect_error([&] { cuda::synchronize(0); }, {"embedding_shard_backward", "token id -3 at position 2", "[0, 12)"});
}

Tensor filled(const Dims& sizes, double value) {
  Tensor t = Tensor::empty(sizes, DType::F32, kGpu);
  t.fill_(value);
  return t;
}

// Note [Device error record]: the op goes on; the next read-back (here the output's copy
// to the host, or synchronize) raises the CPU's message and clears the record, so the
// read-back after it and the next correct call work. A bad row is zeros forward and adds
// nothing backward; every other row is computed.
TEST_F(CudaOps, EmbeddingReportsIdsOutsideTheVocabularyAtTheNextReadBack) {
  Tensor ids = random_ids(10, 50, DType::I64, 1);
  ids.set_flat(3, 50);
  const Tensor table = random_tensor({50, 4}, DType::F32, 2);
  const Tensor gtable = on_gpu(table);
  Tensor out = filled({10, 4}, 7.0);
  embedding_forward(on_gpu(ids), gtable, out);
  expect_error([&] { (void)on_cpu(out); },
               {"embedding_forward", "token id 50 at position 3 is outside the vocabulary [0, 50)", "cuda:0",
                "next read-back"});
  const Tensor got = on_cpu(out);  // the record was reset: no error now
  for (int64_t i = 0; i < 10; ++i)
    for (int64_t j = 0; j < 4; ++j)
      EXPECT_EQ(got.get({i, j}), i == 3 ? 0.0 : table.get({int64_t(ids.get_flat(i)), j})) << i << "," << j;

  ids.set_flat(3, 1);
  ids.set_flat(7, -1);
  Tensor dtable = on_gpu(Tensor::zeros({50, 4}, DType::F32));
  embedding_backward(on_gpu(ids), filled({10, 4}, 1.0), dtable);
  expect_error([&] { cuda::synchronize(0); }, {"embedding_backward", "token id -1 at position 7", "[0, 50)"});
  Tensor want = Tensor::zeros({50, 4}, DType::F32);
  for (int64_t i = 0; i < 10; ++i) {
    const int64_t id = int64_t(ids.get_flat(i));
    for (int64_t j = 0; j < 4 && id >= 0; ++j) want.set({id, j}, want.get({id, j}) + 1);
  }
  EXPECT_TRUE(identical(on_cpu(dtable), want));

  ids.set_flat(7, 2);
  embedding_forward(on_gpu(ids), gtable, out);
  EXPECT_NO_THROW(cuda::check_device_errors(0));
  Tensor all = Tensor::empty({10, 4}, DType::F32);
  embedding_forward(ids, table, all);
  EXPECT_TRUE(identical(on_cpu(out), all));
}

// The op enqueues its kernel and returns: no read-back, no wait of the host. The read-back
// that follows costs what the copy did before the record existed (the copy into pageable
// memory, the stream's synchronisation): the record rides on that wait in pinned memory.
TEST_F(CudaOps, EmbeddingDoesNotWaitForTheDevice) {
  if (!can_count_host_waits()) GTEST_SKIP() << "counts the emulator's host-blocking calls";
  const Tensor ids = on_gpu(random_ids(100, 50, DType::I32, 3));
  const Tensor table = on_gpu(random_tensor({50, 8}, DType::F32, 4));
  Tensor out = Tensor::empty({100, 8}, DType::F32, kGpu);
  Tensor dtable = on_gpu(Tensor::zeros({50, 8}, DType::F32));
  embedding_forward(ids, table, out);  // the first use of the record creates it, with one wait
  cuda::synchronize(0);
  const unsigned long long before = host_waits();
  embedding_forward(ids, table, out);
  embedding_backward(ids, out, dtable);
  EXPECT_EQ(host_waits(), before);
  (void)on_cpu(out);
  EXPECT_EQ(host_waits(), before + 2);
}

}  // namespace
}  // namespace fsdp::test
