// One run per run.dir; see Note [Run lock] in run_lock.h.
#include "fsdp/train/run_lock.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "fsdp/dist/broadcast_text.h"

namespace fsdp::train {

namespace {

namespace fs = std::filesystem;

// "slurm job 123 restart 1" -> {123, 1}; {"", -1} for anything else.
std::pair<std::string, long> slurm_of(const std::string& tag) {
  char job[64] = {0};
  long restart = -1;
  if (std::sscanf(tag.c_str(), "slurm job %63s restart %ld", job, &restart) != 2) return {"", -1};
  return {job, restart};
}

std::map<std::string, std::string> slurm_env() {
  std::map<std::string, std::string> env;
  for (const char* name : {"SLURM_JOB_ID", "SLURM_RESTART_COUNT"})
    if (const char* v = std::getenv(name)) env[name] = v;
  return env;
}

// The directories a run writes in, each once: run.dir, and checkpoint.dir unless it is run.dir.
std::vector<std::pair<std::string, std::string>> dirs_to_lock(const config::Config& cfg) {
  std::vector<std::pair<std::string, std::string>> dirs{{cfg.run.dir, "run.dir"}};
  const std::string ckpt = config::checkpoint_dir(cfg);
  std::error_code ec;
  if (!fs::equivalent(cfg.run.dir, ckpt, ec))
    dirs.emplace_back(ckpt, cfg.checkpoint.dir.empty() ? "checkpoint.dir (<run.dir>/checkpoints)" : "checkpoint.dir");
  return dirs;
}

}  // namespace

DirLockOptions run_lock_options(const std::map<std::string, std::string>& env) {
  DirLockOptions o;
  const auto job = env.find("SLURM_JOB_ID");
  if (job == env.end() || job->second.empty()) return o;
  const auto count = env.find("SLURM_RESTART_COUNT");
  const long restart = count == env.end() ? 0 : std::strtol(count->second.c_str(), nullptr, 10);
  o.tag = fmt::format("slurm job {} restart {}", job->second, restart);
  o.worth_waiting_for = [id = job->second, restart](const LockRecord& holder) {
    const auto [holder_job, holder_restart] = slurm_of(holder.tag);
    return holder_job == id && holder_restart >= 0 && holder_restart < restart;
  };
  o.wait = kPredecessorWait;
  o.on_wait = [](const std::string& line) {
    spdlog::warn("{} (the previous run of this Slurm job, still being stopped)", line);
  };
  return o;
}

RunLock lock_run_dirs(const config::Config& cfg, dist::Communicator& world, const std::vector<std::string>& created) {
  RunLock lock;
  std::string verdict = "ok";
  if (world.rank() == 0) {
    try {
      const DirLockOptions options = run_lock_options(slurm_env());
      for (const auto& [dir, key] : dirs_to_lock(cfg)) {
        std::error_code ec;
        fs::create_directories(dir, ec);
        std::error_code again;
        FSDP_CHECK(!ec || fs::is_directory(dir, again), "{} {}: cannot create it: {}", key, dir, ec.message());
        std::vector<std::string> warnings;
        lock.locks.push_back(DirLock::acquire(dir, key, options, warnings));
        for (const std::string& w : warnings) spdlog::warn("{}", w);
      }
    } catch (const Error& e) {
      release_run_lock(lock, created);
      verdict = std::string("error ") + e.what();
    }
  }
  verdict = dist::broadcast_text(world, verdict);
  FSDP_CHECK(verdict == "ok", "{}", verdict.substr(6));
  return lock;
}

void release_run_lock(RunLock& lock, const std::vector<std::string>& created) {
  for (std::unique_ptr<DirLock>& l : lock.locks) {
    const fs::path dir = fs::path(l->path()).parent_path();
    const bool ours = std::any_of(created.begin(), created.end(), [&](const std::string& c) {
      std::error_code ec;
      return fs::equivalent(dir, c, ec);
    });
    if (ours) l->remove_file();
  }
  lock.locks.clear();
}

}  // namespace fsdp::train
