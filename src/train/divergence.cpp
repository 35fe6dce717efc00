// Stopping a diverged run without leaving a checkpoint that resumes into it; see divergence.h.
#include "fsdp/train/divergence.h"

#include <cmath>
#include <filesystem>
#include <system_error>

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "fsdp/ckpt/checkpoint_reader.h"
#include "fsdp/ckpt/manifest.h"
#include "fsdp/ops/elementwise.h"

namespace fsdp::train {

namespace fs = std::filesystem;

bool weights_finite(const FsdpEngine& engine, dist::Communicator& world) {
  double local = 0;
  for (int u = 0; u < engine.num_units(); ++u) local += sum_squares(engine.master(u));
  // NaN or Inf on any rank makes the sum NaN or Inf on every rank (squares are >= 0).
  Tensor sum = Tensor::zeros({1}, DType::F64);
  sum.data<double>()[0] = std::isfinite(local) ? local : INFINITY;
  world.wait(world.all_reduce(sum));
  return std::isfinite(sum.data<double>()[0]);
}

namespace {

// step_N -> step_N.diverged (or .diverged-2, ... when an earlier run left one): out of
// resume's sight (it takes only step_<digits>) and out of pruning's, so nothing is lost.
std::string set_aside(const std::string& path) {
  std::string target = path + ".diverged";
  for (int k = 2; fs::exists(target); ++k) target = path + ".diverged-" + std::to_string(k);
  std::error_code ec;
  fs::rename(path, target, ec);
  if (ec) {
    spdlog::warn("cannot move the diverged checkpoint {} aside to {}: {}", path, target, ec.message());
    return "";
  }
  return target;
}

// Checkpoint directories name their step: step_<N>.
int64_t step_of(const std::string& path) { return std::stoll(fs::path(path).filename().string().substr(5)); }

}  // namespace

std::string handle_divergence(const Diverged& d, const std::string& dir, bool rank0) {
  std::string line = fmt::format("{}: the run diverged", d.what());
  std::vector<std::string> moved;
  std::string last_good;
  for (const std::string& path : ckpt::list_checkpoints(dir)) {  // newest first
    if (step_of(path) < d.bad_from()) {
      last_good = path;
      break;
    }
    if (!rank0) continue;
    if (const std::string to = set_aside(path); !to.empty()) moved.push_back(fs::path(to).filename().string());
  }
  if (!moved.empty()) {
    line += fmt::format("; moved {} aside ({}: it holds the weights that diverged, so resume skips it)",
                        moved.size() == 1 ? "checkpoint" : "checkpoints", fmt::join(moved, ", "));
  }
  if (!last_good.empty()) {
    line += fmt::format("; the last good checkpoint is {} (step {}), where a rerun resumes: lower optim.lr, keep "
                        "train.grad_clip on, or check the data before it",
                        last_good, step_of(last_good));
  } else {
    line += fmt::format("; no checkpoint in {} predates it, so a rerun starts from step 0: lower optim.lr, keep "
                        "train.grad_clip on, or check the data",
                        dir);
  }
  return line;
}

}  // namespace fsdp::train
