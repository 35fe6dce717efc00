// What a resumed run changes; see resume_changes.h.
#include "fsdp/train/resume_changes.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fsdp/train/setup.h"

namespace fsdp::train {

namespace {

// "8 x 2 x 1 rank" for micro_batch_size x grad_accum_steps x ranks.
std::string batch_terms(const config::Config& c, int world) {
  return fmt::format("micro_batch_size {} x grad_accum_steps {} x {} rank{}", c.train.micro_batch_size,
                     c.train.grad_accum_steps, world, world == 1 ? "" : "s");
}

int64_t global_batch(const config::Config& c, int world) {
  return int64_t(c.train.micro_batch_size) * c.train.grad_accum_steps * world;
}

}  // namespace

std::vector<std::string> resume_changes(const config::Config& saved, int saved_world, const config::Config& now,
                                        int world, int64_t step) {
  std::vector<std::string> out;
  std::vector<std::string> keys;
  auto compare = [&](const char* key, const auto& a, const auto& b) {
    if (a != b) keys.push_back(fmt::format("{} {} -> {}", key, a, b));
  };
  compare("train.max_steps", saved.train.max_steps, now.train.max_steps);
  compare("optim.lr", saved.optim.lr, now.optim.lr);
  compare("optim.min_lr", saved.optim.min_lr, now.optim.min_lr);
  compare("optim.warmup_steps", saved.optim.warmup_steps, now.optim.warmup_steps);
  compare("optim.schedule", config::to_string(saved.optim.schedule), config::to_string(now.optim.schedule));
  if (!keys.empty()) {
    const double was = lr_schedule(saved).at(step + 1), is = lr_schedule(now).at(step + 1);
    out.push_back(fmt::format("the learning-rate schedule differs from the checkpoint's ({}): the lr of step {} is "
                              "{:.3e}, {:.3e} under the checkpoint's schedule; the loss curve does not continue the "
                              "original run's",
                              fmt::join(keys, ", "), step + 1, is, was));
  }
  const int64_t was = global_batch(saved, saved_world), is = global_batch(now, world);
  if (was != is) {
    out.push_back(fmt::format("the global batch differs from the checkpoint's: {} sequences per step ({}), the "
                              "checkpoint's {} ({}); set train.global_batch_size: {} to keep it on any number of ranks",
                              is, batch_terms(now, world), was, batch_terms(saved, saved_world), was));
  }
  return out;
}

}  // namespace fsdp::train
