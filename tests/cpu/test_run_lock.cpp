// One run per directory (core/dir_lock.h, Note [Run lock] in train/run_lock.h), in process:
// flock conflicts between two opens of one lock file exactly as between two processes.
//   - a second lock is refused naming the holder's pid, host and start time; the first's
//     release lets the next one in, without a warning;
//   - a lock file left by a process that died on this host is taken over with a warning;
//   - a record from another host whose heartbeat moves is a live holder even though flock
//     granted the lock (a filesystem whose flock does not reach across nodes): refused,
//     naming Lustre's -o flock; one whose heartbeat stays still is taken over with a warning;
//   - the next run of the same Slurm job waits for its predecessor, anything else does not;
//   - a FIFO planted as the lock file is refused, not waited on;
//   - a waiter whose holder removes the lock file (a run refused at start-up removing the
//     directories it created) starts over on the file at the path.
// The binary's side (two `train` on one run.dir, kill -9, mpiexec) is tests/integration/run_lock.sh.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "fsdp/core/dir_lock.h"
#include "fsdp/core/error.h"
#include "fsdp/train/run_lock.h"
#include "test_util.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("fsdp_run_lock_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

DirLockOptions quick() {
  DirLockOptions o;
  o.heartbeat = 50ms;
  o.stale_after = 600ms;
  return o;
}

std::unique_ptr<DirLock> take(const std::string& dir, const DirLockOptions& o, std::vector<std::string>& warnings) {
  return DirLock::acquire(dir, "run.dir", o, warnings);
}

std::string read_file_for_test(const fs::path& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void write_record(const std::string& dir, const LockRecord& r) {
  std::ofstream(fs::path(dir) / "fsdp_train.lock") << DirLock::format(r);
}

// A pid that is certainly not running: a child that has exited and been reaped.
int64_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

TEST(RunLock, ASecondLockIsRefusedNamingTheHolderUntilTheFirstIsReleased) {
  const std::string dir = scratch("second");
  std::vector<std::string> warnings;
  auto first = take(dir, quick(), warnings);
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(first->record().pid, ::getpid());
  EXPECT_EQ(first->record().host, host_name());
  const std::string holder = fmt::format("run.dir {} is in use by pid {} on host {} (since {})", dir, ::getpid(),
                                         host_name(), first->record().since);
  test::expect_error([&] { take(dir, quick(), warnings); }, {holder});
  // The file says who holds it, for people too.
  const LockRecord on_disk = DirLock::parse(read_file_for_test(fs::path(dir) / "fsdp_train.lock"));
  EXPECT_FALSE(on_disk.released);
  EXPECT_EQ(on_disk.pid, ::getpid());
  first.reset();
  EXPECT_TRUE(DirLock::parse(read_file_for_test(fs::path(dir) / "fsdp_train.lock")).released);
  auto next = take(dir, quick(), warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
}

TEST(RunLock, ALockOfADeadProcessOnThisHostIsTakenOverWithAWarning) {
  const std::string dir = scratch("dead");
  LockRecord r;
  r.host = host_name();
  r.pid = dead_pid();
  r.since = "2026-01-02T03:04:05Z";
  r.released = false;
  write_record(dir, r);
  std::vector<std::string> warnings;
  const auto t0 = std::chrono::steady_clock::now();
  auto taken = take(dir, quick(), warnings);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 300ms) << "a dead pid on this host needs no waiting";
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(fmt::format("taking over the lock of pid {} on host {} (since 2026-01-02T03:04:05Z), "
                                         "which is no longer running",
                                         r.pid, r.host)),
            std::string::npos)
      << warnings[0];
  EXPECT_EQ(taken->record().pid, ::getpid());
}

TEST(RunLock, ALiveHeartbeatFromAnotherHostMeansFlockIsNotCoherent) {
  const std::string dir = scratch("incoherent");
  LockRecord r;
  r.host = "another-node";
  r.pid = 4242;
  r.since = "2026-01-02T03:04:05Z";
  r.released = false;
  write_record(dir, r);
  // The other node's holder, as this node sees it: flock grants the lock here (node-local
  // locks), but the file's heartbeat keeps moving.
  std::atomic<bool> stop{false};
  std::thread holder([&] {
    const std::string path = (fs::path(dir) / "fsdp_train.lock").string();
    while (!stop) {
      ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
      std::this_thread::sleep_for(40ms);
    }
  });
  std::vector<std::string> warnings;
  test::expect_error([&] { take(dir, quick(), warnings); },
                     {"run.dir " + dir + " is in use by pid 4242 on host another-node (since 2026-01-02T03:04:05Z)",
                      "live heartbeat", "Lustre mounted without -o flock"});
  stop = true;
  holder.join();
  // Once the heartbeat stops (the holder's node died), the lock is taken over with a warning.
  warnings.clear();
  auto taken = take(dir, quick(), warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("taking over the lock of pid 4242 on host another-node"), std::string::npos)
      << warnings[0];
  EXPECT_NE(warnings[0].find("heartbeat stopped"), std::string::npos) << warnings[0];
}

TEST(RunLock, TheNextRunOfTheSameSlurmJobWaitsForItsPredecessor) {
  const std::string dir = scratch("slurm");
  DirLockOptions before = train::run_lock_options({{"SLURM_JOB_ID", "77"}, {"SLURM_RESTART_COUNT", "0"}});
  before.heartbeat = 50ms;
  std::vector<std::string> warnings;
  auto predecessor = take(dir, before, warnings);
  EXPECT_EQ(predecessor->record().tag, "slurm job 77 restart 0");

  // Another job is refused at once.
  DirLockOptions other = train::run_lock_options({{"SLURM_JOB_ID", "78"}});
  const auto t0 = std::chrono::steady_clock::now();
  test::expect_error([&] { take(dir, other, warnings); }, {"is in use by pid", ", slurm job 77 restart 0"});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);

  // The requeued run of job 77 waits; its predecessor exits half a second later.
  DirLockOptions requeued = train::run_lock_options({{"SLURM_JOB_ID", "77"}, {"SLURM_RESTART_COUNT", "1"}});
  std::string waited;
  requeued.on_wait = [&](const std::string& line) { waited = line; };
  std::thread exit_later([&] {
    std::this_thread::sleep_for(500ms);
    predecessor.reset();
  });
  auto next = take(dir, requeued, warnings);
  exit_later.join();
  EXPECT_NE(waited.find("is held by pid " + std::to_string(::getpid())), std::string::npos) << waited;
  EXPECT_NE(waited.find("waiting up to 180 s"), std::string::npos) << waited;
  EXPECT_EQ(next->record().tag, "slurm job 77 restart 1");
  EXPECT_TRUE(train::run_lock_options({}).tag.empty());  // outside Slurm: no tag, no waiting
}

// A run refused at start-up removes the directories it created, its lock file first
// (release_run_lock, so that remove_created_dirs finds them empty). A run that was waiting
// on that file then holds a lock on a file no longer in the directory, which keeps nobody
// out: it starts over on the file now at the path, so a third run is still refused.
TEST(RunLock, AWaiterStartsOverWhenTheHolderRemovesTheLockFile) {
  const std::string dir = scratch("removed");
  DirLockOptions before = train::run_lock_options({{"SLURM_JOB_ID", "77"}, {"SLURM_RESTART_COUNT", "0"}});
  before.heartbeat = 50ms;
  std::vector<std::string> warnings;
  train::RunLock refused;
  refused.locks.push_back(take(dir, before, warnings));
  DirLockOptions requeued = train::run_lock_options({{"SLURM_JOB_ID", "77"}, {"SLURM_RESTART_COUNT", "1"}});
  requeued.heartbeat = 50ms;
  std::thread refuse_later([&] {
    std::this_thread::sleep_for(300ms);
    train::release_run_lock(refused, {dir});
  });
  auto next = take(dir, requeued, warnings);
  refuse_later.join();
  EXPECT_TRUE(refused.locks.empty());
  const LockRecord on_disk = DirLock::parse(read_file_for_test(fs::path(dir) / "fsdp_train.lock"));
  EXPECT_FALSE(on_disk.released);
  EXPECT_EQ(on_disk.tag, "slurm job 77 restart 1");
  test::expect_error([&] { take(dir, quick(), warnings); }, {"is in use by pid", ", slurm job 77 restart 1"});
  // A directory the run did not create keeps its lock file (released) for the next run to read.
  train::RunLock kept;
  next.reset();
  kept.locks.push_back(take(dir, quick(), warnings));
  train::release_run_lock(kept, {dir + "/elsewhere"});
  EXPECT_TRUE(DirLock::parse(read_file_for_test(fs::path(dir) / "fsdp_train.lock")).released);
}

TEST(RunLock, AFifoAsTheLockFileIsRefusedNotWaitedOn) {
  const std::string dir = scratch("fifo");
  ASSERT_EQ(::mkfifo((fs::path(dir) / "fsdp_train.lock").c_str(), 0644), 0);
  std::vector<std::string> warnings;
  test::expect_error([&] { take(dir, quick(), warnings); }, {"its lock file", "is not a regular file"});
}

TEST(RunLock, RecordsParseBackAndForeignTextHoldsNobody) {
  LockRecord r;
  r.host = "n01";
  r.pid = 12;
  r.since = "2026-01-02T03:04:05Z";
  r.tag = "slurm job 5 restart 2";
  r.released = false;
  const LockRecord back = DirLock::parse(DirLock::format(r));
  EXPECT_EQ(back.host, "n01");
  EXPECT_EQ(back.pid, 12);
  EXPECT_EQ(back.since, r.since);
  EXPECT_EQ(back.tag, r.tag);
  EXPECT_FALSE(back.released);
  EXPECT_TRUE(DirLock::parse("").released);
  EXPECT_TRUE(DirLock::parse("\x01\x02 binary junk\npid: -5\n").released);
  EXPECT_EQ(DirLock::parse("pid: 99999999999999999999\nstate: running\n").pid, 0);
}

}  // namespace
}  // namespace fsdp
