// The start-up check of a training run's output directories; see output_dirs.h.
#include "fsdp/train/output_dirs.h"

#include <string>

#include "fsdp/core/writable_dir.h"
#include "fsdp/dist/broadcast_text.h"

namespace fsdp::train {

void check_output_dirs(const config::Config& cfg, dist::Communicator& world) {
  std::string error;
  try {
    if (world.rank() == 0 && cfg.logging.metrics) ensure_writable_dir(cfg.run.dir, "run.dir");
    ensure_writable_dir(config::checkpoint_dir(cfg), cfg.checkpoint.dir.empty() ? "checkpoint.dir (<run.dir>/checkpoints)"
                                                                                  : "checkpoint.dir");
  } catch (const Error& e) {
    error = e.what();
  }
  // One all-reduce says which ranks failed; the first of them tells every rank why.
  Tensor failed = Tensor::zeros({int64_t(world.size())}, DType::F64);
  failed.data<double>()[world.rank()] = error.empty() ? 0.0 : 1.0;
  world.wait(world.all_reduce(failed));
  int first = -1;
  for (int r = 0; r < world.size() && first < 0; ++r)
    if (failed.data<double>()[r] != 0) first = r;
  if (first < 0) return;
  const std::string words = dist::broadcast_text(world, error, first);
  FSDP_FAIL("{}{}", words, first == 0 ? "" : fmt::format(" (on rank {} of {})", first, world.size()));
}

}  // namespace fsdp::train
