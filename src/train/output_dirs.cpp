// The start-up check of a training run's output directories; see output_dirs.h.
#include "fsdp/train/output_dirs.h"

#include <algorithm>
#include <filesystem>
#include <string>

#include "fsdp/core/writable_dir.h"
#include "fsdp/dist/broadcast_text.h"

namespace fsdp::train {

namespace {

namespace fs = std::filesystem;

// What creating `dir` makes: it and its ancestors up to the first that exists, deepest first.
std::vector<std::string> missing_dirs(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::path p = fs::path(dir).lexically_normal(); !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
    out.push_back(p.string());
    if (p == p.parent_path()) break;
  }
  return out;
}

}  // namespace

std::vector<std::string> check_output_dirs(const config::Config& cfg, dist::Communicator& world) {
  std::string error;
  std::vector<std::string> created;
  try {
    const std::string ckpt_dir = config::checkpoint_dir(cfg);
    created = missing_dirs(ckpt_dir);
    if (world.rank() == 0 && cfg.logging.metrics) {
      for (std::string& d : missing_dirs(cfg.run.dir)) created.push_back(std::move(d));
      ensure_writable_dir(cfg.run.dir, "run.dir");
    }
    ensure_writable_dir(ckpt_dir, cfg.checkpoint.dir.empty() ? "checkpoint.dir (<run.dir>/checkpoints)"
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
  if (first < 0) return created;
  remove_created_dirs(created);
  const std::string words = dist::broadcast_text(world, error, first);
  FSDP_FAIL("{}{}", words, first == 0 ? "" : fmt::format(" (on rank {} of {})", first, world.size()));
}

void remove_created_dirs(const std::vector<std::string>& dirs) {
  // Deepest first within each list; a directory that holds anything (another rank's file,
  // the run's train.log) stays, as remove() leaves a non-empty directory alone.
  std::vector<std::string> sorted = dirs;
  std::sort(sorted.begin(), sorted.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const std::string& d : sorted) {
    std::error_code ec;
    fs::remove(d, ec);
  }
}

}  // namespace fsdp::train
