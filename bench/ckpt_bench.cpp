// Checkpoint throughput on this machine: a synchronous save of a ~550M-parameter Llama's
// sharded training state (fp32 master weights and both AdamW moments: 12 bytes per
// parameter), the step-loop stall of an asynchronous save (the snapshot copy), the load
// (read + scatter into the engine's shards) and the CRC verification resume runs first (with
// the count of NaN/Inf values it makes in the same pass, against the CRC alone).
// bench/ckpt_bench.sh prints these against the disk's own sequential write and read speed.
//
//   build/bench/ckpt_bench DIR [hidden layers]     (default hidden 1536, 16 layers, vocab 32000)
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "fsdp/ckpt/checkpoint_reader.h"
#include "fsdp/ckpt/checkpoint_writer.h"
#include "fsdp/ckpt/safetensors.h"
#include "fsdp/fsdp/fsdp_engine.h"
#include "fsdp/model/param_init.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fsdp;
  if (argc < 2) {
    std::fprintf(stderr, "usage: ckpt_bench DIR [hidden layers]\n");
    return 2;
  }
  const std::string dir = argv[1];
  model::LlamaConfig cfg{32000, argc > 2 ? std::stoll(argv[2]) : 1536, 0, argc > 3 ? std::stoll(argv[3]) : 16,
                         12, 12, 2048, 10000.0, 1e-5};
  cfg.intermediate_size = (cfg.hidden_size * 8 / 3 + 255) / 256 * 256;
  cfg.validate();
  const auto units = model::llama_units(cfg);
  auto groups = dist::local_process_groups();
  FsdpEngine engine(units, groups, FsdpOptions{});
  engine.init_shards([&](int u, int64_t begin, const Tensor& shard) {
    model::init_unit(units[u], u, 1, 0.02, shard, begin);
  });
  std::vector<ckpt::UnitShard> shards;
  for (int u = 0; u < engine.num_units(); ++u) {
    shards.push_back({engine.shard_range(u).begin, engine.master(u), engine.exp_avg(u), engine.exp_avg_sq(u)});
  }
  ckpt::CheckpointMeta meta;
  meta.model = cfg;
  meta.units = units;
  meta.strategy = "FULL_SHARD";
  std::printf("model: %s, %.2f GB of checkpoint state\n", cfg.summary().c_str(), double(cfg.num_parameters()) * 12 / 1e9);

  std::filesystem::remove_all(dir);
  // A synchronous save at `step`, printed under `label`.
  auto sync_save = [&](int64_t step, const char* label) {
    ckpt::CheckpointWriter sync(groups, ckpt::WriterOptions{dir, 1, false});
    meta.state.step = step;
    const auto t0 = std::chrono::steady_clock::now();
    const ckpt::SaveStats s = sync.save(meta, shards);
    const double secs = seconds_since(t0);
    std::printf("%s %.3f  (%.2f GB in %.2f s, write+fsync %.2f s)\n", label, double(s.bytes) / secs / 1e9,
                double(s.bytes) / 1e9, secs, s.write_seconds);
  };
  // Step 0 is a warm-up, step 4 the measurement. On this Firecracker VM the guest's memory
  // is backed by the host lazily: the first gigabytes of page cache a process fills cost a
  // host page fault each, which made the first 6.6 GB save run at 0.3 GB/s and the same
  // write 0.8 GB/s once memory had been through the cache.
  sync_save(0, "warmup_save_GBps");
  {
    // The first asynchronous save allocates its snapshot buffers (page faults included);
    // the second shows the steady state of a training run.
    ckpt::CheckpointWriter async(groups, ckpt::WriterOptions{dir, 1, true});
    for (int64_t step : {2, 3}) {
      meta.state.step = step;
      const ckpt::SaveStats s = async.save(meta, shards);
      const auto t0 = std::chrono::steady_clock::now();
      async.finish();
      std::printf("async_stall_s %.3f  (%s save: the snapshot copy; the write then took %.2f s more in the "
                  "background)\n",
                  s.stall_seconds, step == 2 ? "first" : "steady-state", seconds_since(t0));
    }
  }
  sync_save(4, "save_sync_GBps");
  const std::string path = dir + "/step_4";
  // Cold reads, as after a requeue on another node: drop the page cache where permitted.
  ::sync();
  const bool dropped = [] {
    std::FILE* f = std::fopen("/proc/sys/vm/drop_caches", "w");
    if (f == nullptr) return false;
    const bool ok = std::fputs("3", f) >= 0;
    return std::fclose(f) == 0 && ok;
  }();
  std::printf("page cache %s before the reads\n", dropped ? "dropped" : "NOT dropped (reads may be cached)");
  double verify_secs = 0;
  {
    const auto t0 = std::chrono::steady_clock::now();
    const ckpt::CheckpointReader r(path);
    r.verify();
    const double secs = verify_secs = seconds_since(t0);
    std::printf("verify_GBps %.3f  (CRC-32 of %.2f GB in %.2f s)\n", double(r.manifest().files[0].bytes) / secs / 1e9,
                double(r.manifest().files[0].bytes) / 1e9, secs);
  }
  {
    const auto t0 = std::chrono::steady_clock::now();
    const ckpt::CheckpointReader r(path);
    uint64_t bytes = 0;
    for (int u = 0; u < engine.num_units(); ++u) {
      r.read(u, "master", engine.shard_range(u).begin, engine.master(u));
      r.read(u, "exp_avg", engine.shard_range(u).begin, engine.exp_avg(u));
      r.read(u, "exp_avg_sq", engine.shard_range(u).begin, engine.exp_avg_sq(u));
      bytes += 3 * engine.master(u).nbytes();
    }
    const double secs = seconds_since(t0);
    std::printf("load_GBps %.3f  (%.2f GB in %.2f s, from the page cache the verification filled)\n",
                double(bytes) / secs / 1e9, double(bytes) / 1e9, secs);
    // What a resume costs from a cold cache: verify (reads every byte from disk) + load.
    std::printf("resume_GBps %.3f  (verify + load, %.2f s)\n", double(bytes) / (secs + verify_secs) / 1e9,
                secs + verify_secs);
  }
  {
    // Verification also counts NaN/Inf values, in the CRC's own pass: from the page cache
    // (no disk in the way), verify() against zlib's CRC alone over the same mapped bytes.
    const ckpt::CheckpointReader r(path);
    const std::string file = path + "/" + r.manifest().files[0].name;
    const size_t n = r.manifest().files[0].bytes;
    const int fd = ::open(file.c_str(), O_RDONLY);
    void* map = ::mmap(nullptr, n, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    double crc_secs = 1e30, verify_warm = 1e30;
    for (int k = 0; k < 3; ++k) {  // best of 3 each
      auto t0 = std::chrono::steady_clock::now();
      const volatile uint32_t crc = ckpt::crc32_parallel(map, n);
      (void)crc;
      crc_secs = std::min(crc_secs, seconds_since(t0));
      t0 = std::chrono::steady_clock::now();
      r.verify();
      verify_warm = std::min(verify_warm, seconds_since(t0));
    }
    ::munmap(map, n);
    std::printf("verify_vs_crc %.3f  (CRC + non-finite count %.2f s, CRC alone %.2f s, %.2f GB from the page cache)\n",
                verify_warm / crc_secs, verify_warm, crc_secs, double(n) / 1e9);
  }
  return 0;
}
