// A directory's exclusive lock and its record; see dir_lock.h.
#include "fsdp/core/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include "fsdp/core/error.h"

namespace fsdp {

namespace {

using Clock = std::chrono::system_clock;
using std::chrono::milliseconds;

std::string utc_now() {
  const std::time_t t = Clock::to_time_t(Clock::now());
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Closes a descriptor unless released.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

LockRecord read_record(int fd) {
  char buf[4096];
  const ssize_t n = ::pread(fd, buf, sizeof buf, 0);
  return DirLock::parse(std::string_view(buf, n > 0 ? size_t(n) : 0));
}

void write_record(int fd, const LockRecord& r) {
  const std::string text = DirLock::format(r);
  // Best effort: the flock is the lock; the record only says who holds it.
  if (::ftruncate(fd, 0) == 0 && ::pwrite(fd, text.data(), text.size(), 0) == ssize_t(text.size())) ::fsync(fd);
}

// The lock file's modification time: its holder's heartbeat.
Clock::time_point heartbeat_of(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Clock::time_point{};
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(st.st_mtim.tv_sec) +
                                                                       std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
}

bool process_alive(int64_t pid) { return pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno == EPERM); }

std::string tag_of(const LockRecord& r) { return r.tag.empty() ? "" : ", " + r.tag; }

// flock(2) errors that mean "this filesystem has no (working) flock", not "held".
bool unsupported(int err) { return err == ENOSYS || err == EOPNOTSUPP || err == ENOLCK || err == EINVAL; }

// A record of a holder that never released it, found while this process may lock (flock
// granted it, or there is no flock): is that holder gone? On this host its pid says so. On
// another, only its heartbeat can: a heartbeat that moves while this process watches it is
// a live holder (then flock did not reach across nodes: refuse); one that stays still for
// stale_after is a holder that is gone (killed, or its node died: take over, with a warning).
void judge_unreleased(int fd, const LockRecord& prev, const std::string& dir, std::string_view key,
                      const DirLockOptions& opt, bool kernel_lock, std::vector<std::string>& warnings) {
  const std::string here = host_name();
  // This very pid on this host is a predecessor that had it (pids repeat in containers),
  // since this process holds no other lock here.
  if (prev.host == here && (prev.pid == ::getpid() || !process_alive(prev.pid))) {
    warnings.push_back(fmt::format("{} {}: taking over the lock of {}{}, which is no longer running (it was killed or "
                                   "crashed without releasing it)",
                                   key, dir, prev.describe(), tag_of(prev)));
    return;
  }
  const Clock::time_point first = heartbeat_of(fd);
  const auto age = Clock::now() - first;
  if (age < opt.stale_after) {
    // A heartbeat from the future (another host's clock ahead) is watched for stale_after at most.
    const auto deadline = std::chrono::steady_clock::now() +
                          std::min<Clock::duration>(opt.stale_after - age, opt.stale_after);
    const milliseconds poll = std::clamp(opt.heartbeat / 4, milliseconds(20), milliseconds(1000));
    while (std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(poll);
      if (heartbeat_of(fd) == first) continue;
      if (kernel_lock) {
        FSDP_FAIL("{} {} is in use by {}{}: its lock file {} has a live heartbeat although flock(2) let this "
                  "process lock it, so this filesystem's locks do not reach across nodes (Lustre mounted without "
                  "-o flock or with -o localflock, BeeGFS without global file locks): two runs here would destroy "
                  "each other's checkpoints; stop that run first, or use a run.dir on a filesystem with coherent "
                  "flock",
                  key, dir, prev.describe(), tag_of(prev), (std::filesystem::path(dir) / opt.file_name).string());
      }
      FSDP_FAIL("{} {} is in use by {}{} (its lock file's heartbeat is live; this filesystem has no flock(2), so the "
                "record is what tells)",
                key, dir, prev.describe(), tag_of(prev));
    }
  }
  warnings.push_back(fmt::format("{} {}: taking over the lock of {}{}, whose heartbeat stopped (killed, or its node "
                                 "died, without releasing it)",
                                 key, dir, prev.describe(), tag_of(prev)));
}

}  // namespace

std::string LockRecord::describe() const {
  return fmt::format("pid {} on host {} (since {})", pid, host.empty() ? "?" : host, since.empty() ? "?" : since);
}

LockRecord DirLock::parse(std::string_view text) {
  LockRecord r;
  bool state_seen = false;
  while (!text.empty()) {
    const size_t end = std::min(text.find('\n'), text.size());
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    const size_t colon = line.find(": ");
    if (line.starts_with('#') || colon == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, colon), value = line.substr(colon + 2);
    if (name == "host") r.host = value;
    else if (name == "since") r.since = value;
    else if (name == "tag") r.tag = value;
    else if (name == "state") {
      r.released = value != "running";
      state_seen = true;
    } else if (name == "pid") {
      int64_t pid = 0;
      const auto [end_ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), pid);
      r.pid = ec == std::errc() && end_ptr == value.data() + value.size() && pid > 0 ? pid : 0;
    }
  }
  if (!state_seen) r.released = true;  // an empty or foreign file holds nobody
  return r;
}

std::string DirLock::format(const LockRecord& r) {
  return fmt::format(
      "# fsdp_train's lock: while the process below runs, it holds an flock(2) on this file and touches it every few "
      "seconds\nhost: {}\npid: {}\nsince: {}\ntag: {}\nstate: {}\n",
      r.host, r.pid, r.since, r.tag, r.released ? "released" : "running");
}

struct DirLock::Heartbeat {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread thread;
};

DirLock::DirLock(int fd, std::string path, LockRecord record, milliseconds heartbeat)
    : fd_(fd), path_(std::move(path)), record_(std::move(record)), heartbeat_(std::make_unique<Heartbeat>()) {
  Heartbeat& h = *heartbeat_;
  try {
    h.thread = std::thread([&h, fd, heartbeat] {
      std::unique_lock<std::mutex> lock(h.mu);
      while (!h.cv.wait_for(lock, heartbeat, [&h] { return h.stop; })) ::futimens(fd, nullptr);
    });
  } catch (const std::system_error&) {
    // No thread to spare: the flock still holds; only the cross-node check loses its signal.
  }
}

DirLock::~DirLock() {
  {
    const std::lock_guard<std::mutex> lock(heartbeat_->mu);
    heartbeat_->stop = true;
  }
  heartbeat_->cv.notify_all();
  if (heartbeat_->thread.joinable()) heartbeat_->thread.join();
  LockRecord released = record_;
  released.released = true;
  write_record(fd_, released);
  ::close(fd_);  // drops the flock
}

void DirLock::remove_file() {
  std::error_code ec;
  std::filesystem::remove(path_, ec);  // best effort: a lock file left behind holds nobody
}

std::unique_ptr<DirLock> DirLock::acquire(const std::string& dir, std::string_view key, const DirLockOptions& opt,
                                          std::vector<std::string>& warnings) {
  const std::string path = (std::filesystem::path(dir) / opt.file_name).string();
  // O_NONBLOCK: a FIFO planted under the lock file's name must not hang the run.
  FdGuard fd{::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644)};
  if (fd.fd < 0) FSDP_FAIL("{} {}: cannot open its lock file {}: {}", key, dir, path, std::strerror(errno));
  struct stat st {};
  FSDP_CHECK(::fstat(fd.fd, &st) == 0 && S_ISREG(st.st_mode), "{} {}: its lock file {} is not a regular file", key,
             dir, path);
  ::fcntl(fd.fd, F_SETFL, ::fcntl(fd.fd, F_GETFL) & ~O_NONBLOCK);

  bool kernel_lock = true;
  if (::flock(fd.fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (unsupported(err)) {
      kernel_lock = false;
      warnings.push_back(fmt::format(
          "{} {}: this filesystem does not support flock(2) ({}; Lustre needs -o flock): two runs started on it at "
          "the same moment are not kept apart; the lock file {} and its heartbeat are what refuses a second run",
          key, dir, std::strerror(err), path));
    } else if (err != EWOULDBLOCK) {
      FSDP_FAIL("{} {}: cannot lock {}: {}", key, dir, path, std::strerror(err));
    } else {
      LockRecord holder = read_record(fd.fd);
      bool locked = false;
      if (opt.wait.count() > 0 && opt.worth_waiting_for && opt.worth_waiting_for(holder)) {
        if (opt.on_wait) {
          opt.on_wait(fmt::format("{} {} is held by {}{}: waiting up to {} s for it to exit", key, dir,
                                  holder.describe(), tag_of(holder), (opt.wait.count() + 999) / 1000));
        }
        const auto deadline = std::chrono::steady_clock::now() + opt.wait;
        while (!locked && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(std::min(milliseconds(200), opt.wait));
          locked = ::flock(fd.fd, LOCK_EX | LOCK_NB) == 0;
        }
        holder = read_record(fd.fd);
      }
      if (!locked) FSDP_FAIL("{} {} is in use by {}{}", key, dir, holder.describe(), tag_of(holder));
    }
  }
  // The holder may have removed the lock file while this process waited for it (a run refused
  // at start-up removes the directories it created, its lock file first: remove_file()). A
  // lock on a file no longer at `path` keeps nobody out, so start over on the one there now.
  struct stat now {};
  if (::stat(path.c_str(), &now) != 0 || now.st_ino != st.st_ino || now.st_dev != st.st_dev)
    return acquire(dir, key, opt, warnings);
  const LockRecord prev = read_record(fd.fd);
  if (!prev.released && prev.pid != 0) judge_unreleased(fd.fd, prev, dir, key, opt, kernel_lock, warnings);

  LockRecord mine;
  mine.host = host_name();
  mine.pid = ::getpid();
  mine.since = utc_now();
  mine.tag = opt.tag;
  mine.released = false;
  write_record(fd.fd, mine);
  return std::unique_ptr<DirLock>(new DirLock(fd.release(), path, std::move(mine), opt.heartbeat));
}

}  // namespace fsdp
