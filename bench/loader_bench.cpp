// Loader throughput against what training consumes: micro-batches per second the
// streaming loader delivers from token shards (shuffled, as training reads them) with 0, 1
// and 2 worker threads, printed as a multiple of the rate a tiny-model training step
// consumes (measured here too, on the same shards).
//
//   build/bench/loader_bench [shard dir]   (default data/demo/shards; run scripts/demo_corpus.sh first)
#include <chrono>
#include <cstdio>
#include <string>

#include "fsdp/config/config.h"
#include "fsdp/data/loader.h"
#include "fsdp/dist/communicator.h"
#include "fsdp/train/trainer.h"

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "data/demo/shards";
  const int64_t micro = 8, T = 128, vocab = 1024;
  std::shared_ptr<const fsdp::data::SampleSource> corpus = fsdp::data::open_token_corpus(dir, "train", T, vocab);

  // What a step consumes: tiny preset, 2 micro-batches of 8 x 128 per step.
  auto groups = fsdp::dist::local_process_groups();
  fsdp::train::Trainer trainer(
      fsdp::config::load_config_string("", "loader_bench",
                                       {"data.source=shards", "data.path=" + dir, "train.micro_batch_size=8",
                                        "train.seq_len=128", "train.grad_accum_steps=2", "logging.metrics=false"}),
      groups);
  double step_ms = 0, wait_ms = 0;
  trainer.train_step();
  for (int i = 0; i < 10; ++i) {
    const auto m = trainer.train_step();
    step_ms += m.step_ms / 10;
    wait_ms += m.data_wait_ms / 10;
  }
  const double needed = 2.0 / (step_ms / 1e3);
  std::printf("tiny step: %.1f ms for 2 micro-batches of %lldx%lld -> consumes %.1f micro-batches/s; "
              "waits %.3f ms for data per step (%.3f%% of the step)\n\n",
              step_ms, (long long)micro, (long long)T, needed, wait_ms, 100.0 * wait_ms / step_ms);

  std::printf("%8s %9s %16s %18s\n", "workers", "prefetch", "micro-batches/s", "x what a step needs");
  for (int workers : {0, 1, 2}) {
    fsdp::data::LoaderOptions o;
    o.micro_batch = micro;
    o.seq_len = T;
    o.seed = 1;
    o.num_workers = workers;
    o.prefetch = workers == 0 ? 0 : 4;
    fsdp::data::Loader loader(corpus, o);
    fsdp::Tensor ids = fsdp::Tensor::empty({micro * T}, fsdp::DType::I32);
    fsdp::Tensor targets = fsdp::Tensor::empty({micro * T}, fsdp::DType::I32);
    const int n = 20000;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) loader.next(ids, targets);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%8d %9d %16.0f %17.0fx\n", workers, o.prefetch, n / s, n / s / needed);
  }
  return 0;
}
