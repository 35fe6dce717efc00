// A run's claim on its checkpoint.dir; see Note [Run ownership] in run_ownership.h.
#include "fsdp/train/run_ownership.h"

#include <filesystem>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "fsdp/ckpt/run_ownership.h"
#include "fsdp/dist/broadcast_text.h"

namespace fsdp::train {

namespace {

namespace fs = std::filesystem;

// "step_10, step_20 (run 2025...-1a2b3c4d), step_30 (unreadable)", at most a handful.
std::string describe(const std::vector<ckpt::CheckpointOwner>& owners) {
  std::vector<std::string> names;
  for (size_t i = 0; i < owners.size() && i < 6; ++i) {
    const ckpt::CheckpointOwner& o = owners[i];
    std::string name = fs::path(o.path).filename().string();
    if (!o.readable) name += " (unreadable)";
    else if (!o.run_id.empty()) name += " (run " + o.run_id + ")";
    names.push_back(std::move(name));
  }
  if (owners.size() > names.size()) names.push_back(fmt::format("and {} more", owners.size() - names.size()));
  return fmt::format("{}", fmt::join(names, ", "));
}

// Rank 0: moves what is in the way aside, or says why the run may not start ("" when it
// may; "refuse " + the reason when the config must change, exit 2). A fresh run also moves
// its predecessor's metrics.jsonl, which it would truncate.
std::string clear_the_way(const config::Config& cfg, const std::vector<ckpt::CheckpointOwner>& foreign, bool fresh) {
  const std::string dir = config::checkpoint_dir(cfg);
  if (!cfg.checkpoint.overwrite) {
    // A fresh start over this directory's checkpoints is most often the same command run
    // again with checkpoint.resume: none, the user's own earlier run: say so, and what
    // starts over (both keys), not "another run".
    if (fresh) {
      return fmt::format(
          "refuse checkpoint.dir {} holds {} checkpoint(s) of an earlier run: {}. checkpoint.resume: {} starts a new "
          "run, which would mix its checkpoints with them (keep_last rotation could delete its own). To start over, "
          "set checkpoint.resume: none and checkpoint.overwrite: true (the old checkpoints are moved aside into "
          "{}/replaced-<time>/); {}or point run.dir (or checkpoint.dir) elsewhere",
          dir, foreign.size(), describe(foreign), cfg.checkpoint.resume, dir,
          // Under resume: auto these are the checkpoints it could not resume from: no advice to set it.
          cfg.checkpoint.resume == "auto" ? "" : "to continue that run, checkpoint.resume: auto; ");
    }
    return fmt::format(
        "refuse checkpoint.dir {} holds {} checkpoint(s) of another run: {}. This resumed run would mix its "
        "checkpoints with them, and keep_last rotation could delete its own. Point checkpoint.dir (or run.dir) "
        "elsewhere, or set checkpoint.overwrite: true to move them aside",
        dir, foreign.size(), describe(foreign));
  }
  try {
    const std::string aside = ckpt::move_checkpoints_aside(dir, foreign);
    spdlog::warn("checkpoint.overwrite: moved {} checkpoint(s) of another run ({}) to {}", foreign.size(),
                 describe(foreign), aside);
    const fs::path metrics = fs::path(cfg.run.dir) / "metrics.jsonl";
    std::error_code ec;
    if (fresh && cfg.logging.metrics && fs::exists(metrics, ec)) {
      const std::string to = metrics.string() + ".replaced-" + ckpt::utc_stamp();
      fs::rename(metrics, to, ec);
      if (ec) return fmt::format("cannot move {} to {}: {}", metrics.string(), to, ec.message());
      spdlog::warn("checkpoint.overwrite: moved the other run's {} to {}", metrics.string(), to);
    }
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

std::string claim_checkpoint_dir(const config::Config& cfg, dist::Communicator& world, const std::string& resumed_from,
                                 const std::string& resumed_run_id) {
  const bool fresh = resumed_from.empty();
  // Rank 0 looks and decides; the others learn the id, or fail with rank 0's words.
  std::string verdict;
  if (world.rank() == 0) {
    const std::string id = resumed_run_id.empty() ? ckpt::new_run_id() : resumed_run_id;
    std::vector<ckpt::CheckpointOwner> foreign;
    for (ckpt::CheckpointOwner& o : ckpt::checkpoint_owners(config::checkpoint_dir(cfg))) {
      // A checkpoint whose manifest cannot be read is broken, not another run's: resume: auto
      // skipped it (with a warning naming why) as it skips one that fails its CRCs, and it
      // would have resumed from it, as from any complete checkpoint here, had it been whole.
      // It stays until this run writes its step or rotation removes it.
      if (!o.readable && cfg.checkpoint.resume == "auto") {
        spdlog::warn("checkpoint.dir {}: {} is a broken checkpoint (its manifest.json cannot be read; see above) and "
                     "was skipped{}",
                     config::checkpoint_dir(cfg), fs::path(o.path).filename().string(),
                     fresh ? "; no earlier checkpoint verifies, so this run starts from step 0" : "");
        continue;
      }
      // Checkpoints without a run id predate run ids: a resumed run cannot tell them from its own.
      const bool other = fresh || (!o.run_id.empty() && o.run_id != id);
      if (other && fs::path(o.path) != fs::path(resumed_from)) foreign.push_back(std::move(o));
    }
    const std::string why = foreign.empty() ? "" : clear_the_way(cfg, foreign, fresh);
    verdict = why.empty() ? "ok " + id : "error " + why;
  }
  verdict = dist::broadcast_text(world, verdict);
  if (verdict.starts_with("error refuse ")) throw config::ConfigError(verdict.substr(13));
  FSDP_CHECK(verdict.starts_with("ok "), "{}", verdict.substr(6));
  return verdict.substr(3);
}

}  // namespace fsdp::train
