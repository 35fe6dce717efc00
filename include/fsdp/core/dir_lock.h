// An exclusive lock on a directory for as long as a process works in it: flock(2) on a lock
// file in the directory, which also records who holds it (host, pid, since when, a tag) so
// that a refusal can name the holder. The kernel drops an flock when its holder dies, however
// it dies, so a lock never outlives its process on a filesystem where flock works.
//
// Where flock does not reach every node (Lustre mounted without -o flock answers ENOSYS;
// Lustre with -o localflock and BeeGFS without global file locks lock per node only), the
// record stands in for it: a holder touches the lock file every `heartbeat`, and a record
// that says "running" with a heartbeat that still moves is a live holder even though flock
// was granted. That is how an incoherent flock is detected, at the cost of watching the
// heartbeat for up to `stale_after` when a record from another host was never released
// (its holder was killed, or its node died, or the lock is not coherent).
//
// The policy (which directories, which holders are worth waiting for, the config keys in
// the messages) is the caller's: train/run_lock.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fsdp {

// What a lock file says about its holder (or its last holder).
struct LockRecord {
  std::string host;
  int64_t pid = 0;
  std::string since;  // UTC, "2026-01-02T03:04:05Z"
  std::string tag;    // what the holder is, e.g. "slurm job 123 restart 0"; may be empty
  bool released = true;  // the holder let go cleanly (false: it is running, or it died)

  // "pid 1234 on host n01 (since 2026-01-02T03:04:05Z)".
  std::string describe() const;
};

struct DirLockOptions {
  std::string file_name = "fsdp_train.lock";
  std::string tag;  // recorded for the next one to read
  std::chrono::milliseconds heartbeat{10'000};
  // A heartbeat that has not moved for this long belongs to a holder that is gone.
  std::chrono::milliseconds stale_after{30'000};
  // A holder this accepts (e.g. the previous run of the same Slurm job, still being killed)
  // is waited for, up to `wait`, before the lock is refused; `on_wait` is told once.
  std::function<bool(const LockRecord& holder)> worth_waiting_for;
  std::chrono::milliseconds wait{0};
  std::function<void(const std::string& line)> on_wait;
};

class DirLock {
 public:
  // Locks `dir` (which must exist) for this process, or throws fsdp::Error naming `key`,
  // the directory and the holder:
  //   "run.dir runs/x is in use by pid 1234 on host n01 (since 2026-01-02T03:04:05Z)"
  // `warnings` receives what the caller should log: a stale lock taken over, a filesystem
  // without flock.
  static std::unique_ptr<DirLock> acquire(const std::string& dir, std::string_view key, const DirLockOptions& options,
                                          std::vector<std::string>& warnings);
  // Records the release, then unlocks (closing the file).
  ~DirLock();
  // Removes the lock file while still holding it, for a directory about to be removed; a
  // process waiting on the removed file finds it gone once it gets the lock, and starts over
  // (acquire compares the file it locked with the one at its path).
  void remove_file();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  const std::string& path() const { return path_; }
  // The lock file's record as this holder wrote it.
  const LockRecord& record() const { return record_; }

  // The record in a lock file's text; fields it lacks keep their defaults.
  static LockRecord parse(std::string_view text);
  static std::string format(const LockRecord& record);

 private:
  DirLock(int fd, std::string path, LockRecord record, std::chrono::milliseconds heartbeat);
  struct Heartbeat;
  int fd_ = -1;
  std::string path_;
  LockRecord record_;
  std::unique_ptr<Heartbeat> heartbeat_;
};

}  // namespace fsdp
