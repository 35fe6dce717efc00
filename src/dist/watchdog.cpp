// The collective watchdog: the deadline-polled wait, the side-communicator census of who
// arrived, and the job's abort. See fsdp/dist/watchdog.h for the contract.
//
// Note [Watchdog census]
// Messages on the side channel (a duplicate of MPI_COMM_WORLD, watchdog_mpi.cpp, or the TCP
// store's relay in a job launched without MPI, watchdog_store.cpp) are int64 arrays:
//   QUERY  {kQuery,  query id, group id, group hash, seq, step}
//   REPLY  {kReply,  query id, group id, collectives this rank issued on it (-1: unknown group),
//           group id / op / seq of the collective this rank waits in, step}
//   NOTICE {kNotice, group id, seq, step, absent world ranks...}  "my watchdog fired: I abort the job"
// A rank reads the side communicator only inside watched_wait (every millisecond) and during
// its own census and linger, so a rank that is computing, stopped or dead never answers. The
// group hash (of the name and the member list) guards the id: a member that registered its
// groups in another order answers "unknown group" rather than a wrong count.
// A rank that a NOTICE names as absent says nothing more: it is the one that was stopped or
// stuck, and the launcher may wake it (mpirun sends SIGCONT before it kills) only for it to
// find everyone else gone. A rank woken by a NOTICE that finds every member of its own
// collective present also stays quiet: nothing it waits for is missing.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <string>
#include <vector>

#include "detail.h"
#include "fsdp/dist/watchdog.h"

namespace fsdp::dist {
namespace {

using Clock = std::chrono::steady_clock;
using detail::Collective;
using Message = std::vector<int64_t>;

enum Kind : int64_t { kQuery = 1, kReply = 2, kNotice = 3 };

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Group {
  std::string name;
  std::vector<int> members;  // world ranks, in group-rank order
  uint64_t hash = 0;
  uint64_t issued = 0;
  bool alive = true;
};

struct Waiting {
  int group = -1;
  Collective op = Collective::Barrier;
  uint64_t seq = 0;
};

// Sets what this rank waits in for a scope (a report may throw: tests leave waits that way).
struct WaitingScope {
  WaitingScope(Waiting& slot, const Waiting& now) : slot_(slot), saved_(slot) { slot = now; }
  ~WaitingScope() { slot_ = saved_; }
  Waiting& slot_;
  Waiting saved_;
};

struct Reply {
  int64_t issued = -1;
  Waiting waits;
};

uint64_t group_hash(const std::string& name, const std::vector<int>& members) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  auto mix = [&](uint64_t v) {
    for (int b = 0; b < 8; ++b) {
      h ^= (v >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (char c : name) mix(uint64_t(uint8_t(c)));
  for (int m : members) mix(uint64_t(uint32_t(m)));
  return h >> 1;  // fits an int64 message slot
}

class Watchdog {
 public:
  WatchdogOptions options;
  int64_t step = -1;

  void start(std::unique_ptr<detail::WatchdogChannel> channel, std::vector<std::string> hosts) {
    if (channel_ != nullptr) return;
    channel_ = std::move(channel);
    rank_ = channel_->rank();
    hosts_ = std::move(hosts);
  }

  void stop() {
    if (channel_ != nullptr) channel_->stop();
    channel_.reset();
  }

  bool armed() const { return options.timeout_s > 0 && channel_ != nullptr; }
  const std::vector<std::string>& hosts() const { return hosts_; }

  int watch(const std::string& name, std::vector<int> members) {
    Group g{name, std::move(members)};
    g.hash = group_hash(g.name, g.members);
    groups_.push_back(std::move(g));
    return int(groups_.size()) - 1;
  }
  void forget(int id) { group(id).alive = false; }
  uint64_t count(int id) { return ++group(id).issued; }

  void wait(int id, Collective op, uint64_t seq, detail::FunctionRef<bool()> done) {
    const WaitingScope scope(waiting_, Waiting{id, op, seq});
    const Clock::time_point t0 = Clock::now();
    auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.timeout_s));
    Clock::time_point next_service = t0, last = t0;
    bool reported = false, suspended = false;
    while (!done()) {
      const Clock::time_point t = Clock::now();
      // This loop turns every few microseconds; a gap of a second means this rank was not
      // running (stopped, or its machine paused): that time is not the others' fault, and
      // when the others' watchdog fired meanwhile, this rank is the one they named.
      if (t - last > std::chrono::seconds(1)) {
        deadline += t - last;
        suspended = true;
      }
      last = t;
      if (t < next_service) continue;
      next_service = t + std::chrono::milliseconds(1);
      service();
      if (reported || suspended) continue;
      if (notice_from_ >= 0) {
        if (!named_absent_)
          fail(fmt::format("abandoned after {:.1f} s (world rank {}'s watchdog fired)", seconds(t - t0), notice_from_),
               seconds(t - t0), /*quiet_if_all_present=*/true);
        reported = true;
      } else if (t >= deadline) {
        fail(fmt::format("did not complete within {:g} s", options.timeout_s), seconds(t - t0), false);
        reported = true;
      }
    }
  }

  void poll(const Waiting& w, double waited, const std::string* failure) {
    const WaitingScope scope(waiting_, w);  // what this rank's replies say it waits in
    service();
    const bool seen = w.group == polled_.group && w.seq == polled_.seq;
    if (w.group >= 0 && !seen) {
      if (failure != nullptr) {
        polled_ = w;
        fail(fmt::format("failed ({})", *failure), waited, false);
      } else if (notice_from_ >= 0) {
        polled_ = w;
        if (!named_absent_)
          fail(fmt::format("abandoned after {:.1f} s (world rank {}'s watchdog fired)", waited, notice_from_), waited,
               true);
      } else if (waited >= options.timeout_s) {
        polled_ = w;
        fail(fmt::format("did not complete within {:g} s", options.timeout_s), waited, false);
      }
    }
  }

  void failed(int id, Collective op, uint64_t seq, const std::string& what) {
    const WaitingScope scope(waiting_, Waiting{id, op, seq});
    fail(fmt::format("failed ({})", what), 0, false);
  }

  void add_abort_hook(const void* key, std::function<void()> fn) { abort_hooks_[key] = std::move(fn); }
  void remove_abort_hook(const void* key) { abort_hooks_.erase(key); }

 private:
  Group& group(int id) {
    FSDP_CHECK(id >= 0 && id < int(groups_.size()), "watchdog: no group {}", id);
    return groups_[size_t(id)];
  }

  void send(int to, const Message& m) { channel_->send(to, m); }

  // Answers questions, records answers and notices. Errors on the side channel (a dead
  // peer's connection) are the channel's to swallow: silence is the answer.
  void service() {
    int from = -1;
    Message m;
    for (int guard = 0; guard < 4096 && channel_->receive(&from, &m); ++guard) {
      if (!m.empty()) receive(from, m);
    }
    channel_->progress();
  }

  void receive(int from, const Message& m) {
    if (m[0] == kQuery && m.size() >= 6) {
      const int id = int(m[2]);
      const bool known = id >= 0 && id < int(groups_.size()) && groups_[size_t(id)].alive &&
                         groups_[size_t(id)].hash == uint64_t(m[3]);
      send(from, Message{kReply, m[1], m[2], known ? int64_t(groups_[size_t(id)].issued) : -1, waiting_.group,
                         int64_t(waiting_.op), int64_t(waiting_.seq), step});
    } else if (m[0] == kReply && m.size() >= 8) {
      if (m[1] == query_id_) replies_[from] = Reply{m[3], Waiting{int(m[4]), Collective(m[5]), uint64_t(m[6])}};
    } else if (m[0] == kNotice && m.size() >= 4) {
      if (notice_from_ < 0) notice_from_ = from;
      if (std::find(m.begin() + 4, m.end(), int64_t(rank_)) != m.end()) named_absent_ = true;
    }
  }

  // Asks every other member of the group how far it got; returns after every answer or
  // the grace period.
  void census(const Group& g) {
    ++query_id_;
    replies_.clear();
    const Message q{kQuery, query_id_, waiting_.group, int64_t(g.hash), int64_t(waiting_.seq), step};
    size_t asked = 0;
    for (int m : g.members) {
      if (m == rank_) continue;
      send(m, q);
      ++asked;
    }
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(watchdog_grace_seconds(options.timeout_s)));
    while (replies_.size() < asked && Clock::now() < until) service();
  }

  std::string describe_wait(const Waiting& w) const {
    if (w.group < 0) return "is in no collective";
    const std::string name = w.group < int(groups_.size()) ? groups_[size_t(w.group)].name : "?";
    return fmt::format("waits in {} #{} on group '{}'", detail::collective_name(w.op), w.seq, name);
  }

  WatchdogReport report(const Group& g, const std::string& cause, double waited) const {
    WatchdogReport r;
    r.collective = detail::collective_name(waiting_.op);
    r.group = g.name;
    r.members = describe_world_ranks(g.members);
    r.seq = waiting_.seq;
    r.step = step;
    r.waited_s = waited;
    r.cause = cause;
    r.exit_code = options.exit_code;
    const double grace = watchdog_grace_seconds(options.timeout_s);
    for (int m : g.members) {
      if (m == rank_) continue;
      const auto it = replies_.find(m);
      std::string why;
      if (it == replies_.end()) {
        why = fmt::format("no reply within {:g} s: dead, stopped, or busy outside any collective", grace);
      } else if (it->second.issued < 0) {
        why = "it does not know this group (destroyed there, or the ranks made their groups in different orders)";
      } else if (uint64_t(it->second.issued) < waiting_.seq) {
        why = fmt::format("it entered {} collective(s) on this group and {}", it->second.issued,
                          describe_wait(it->second.waits));
      } else {
        continue;  // arrived
      }
      r.absent.push_back({m, m < int(hosts_.size()) ? hosts_[size_t(m)] : "?", why});
    }
    return r;
  }

  void fail(const std::string& cause, double waited, bool quiet_if_all_present) {
    const Group& g = group(waiting_.group);
    census(g);
    const WatchdogReport r = report(g, cause, waited);
    if (quiet_if_all_present && r.absent.empty()) return;
    if (options.report) {
      options.report(r);
    } else {
      std::fprintf(stderr, "%s\n", r.line().c_str());
    }
    if (!options.abort) return;
    Message notice{kNotice, waiting_.group, int64_t(waiting_.seq), step};
    for (const WatchdogReport::Absent& a : r.absent) notice.push_back(a.world_rank);
    for (int m = 0; m < int(hosts_.size()); ++m) {
      if (m != rank_) send(m, notice);
    }
    // Stay reachable while the ranks this notice wakes take their own census.
    const double linger = watchdog_grace_seconds(options.timeout_s) + 1.0;
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(linger));
    while (Clock::now() < until) service();
    for (auto& [key, fn] : abort_hooks_) fn();
    std::fflush(stdout);
    std::fflush(stderr);
    channel_->abort(options.exit_code);
  }

 public:
  void run_abort_hooks() {
    for (auto& [key, fn] : abort_hooks_) fn();
  }

 private:
  std::unique_ptr<detail::WatchdogChannel> channel_;
  int rank_ = 0;
  std::vector<std::string> hosts_;
  std::deque<Group> groups_;
  Waiting waiting_;
  int64_t query_id_ = 0;
  std::map<int, Reply> replies_;
  int notice_from_ = -1;
  Waiting polled_;  // the collective an external wait last reported (poll reports each once)
  bool named_absent_ = false;  // a NOTICE named this rank as one that did not arrive
  std::map<const void*, std::function<void()>> abort_hooks_;
};

Watchdog& the_watchdog() {
  static Watchdog w;
  return w;
}

}  // namespace

void configure_watchdog(WatchdogOptions options) {
  FSDP_CHECK(options.timeout_s >= 0 && options.timeout_s < 1e9, "watchdog: timeout {} s is not in [0, 1e9)",
             options.timeout_s);
  the_watchdog().options = std::move(options);
}

const WatchdogOptions& watchdog_options() { return the_watchdog().options; }

void set_watchdog_step(int64_t step) { the_watchdog().step = step; }

double watchdog_grace_seconds(double timeout_s) { return std::clamp(timeout_s / 10, 1.0, 5.0); }

std::string WatchdogReport::line() const {
  std::string s = fmt::format("watchdog: {} #{} on group '{}' ({}) {} {}", collective, seq, group, members, cause,
                              step >= 0 ? fmt::format("at step {}", step) : std::string("before the first step"));
  if (absent.empty()) {
    s += ": every member arrived, yet it did not complete (the network between them?)";
  } else {
    // One clause per reason, naming its ranks: "world ranks 2 (host b), 3 (host b) did not arrive (...)".
    std::vector<std::pair<std::string, std::vector<const Absent*>>> by_why;
    for (const Absent& a : absent) {
      auto it = std::find_if(by_why.begin(), by_why.end(), [&](const auto& p) { return p.first == a.why; });
      if (it == by_why.end()) {
        by_why.push_back({a.why, {&a}});
      } else {
        it->second.push_back(&a);
      }
    }
    for (size_t i = 0; i < by_why.size(); ++i) {
      const auto& [why, ranks] = by_why[i];
      s += i == 0 ? ": " : "; ";
      s += ranks.size() == 1 ? "world rank " : "world ranks ";
      for (size_t k = 0; k < ranks.size(); ++k)
        s += fmt::format("{}{} (host {})", k ? ", " : "", ranks[k]->world_rank, ranks[k]->host);
      s += fmt::format(" did not arrive ({})", why);
    }
  }
  if (exit_code != 0) s += fmt::format("; aborting the job with exit code {}", exit_code);
  return s;
}

namespace detail {

void start_watchdog(std::unique_ptr<WatchdogChannel> channel, std::vector<std::string> hosts) {
  the_watchdog().start(std::move(channel), std::move(hosts));
}
void run_watchdog_abort_hooks() { the_watchdog().run_abort_hooks(); }
void stop_watchdog() { the_watchdog().stop(); }
const std::vector<std::string>& world_hosts() { return the_watchdog().hosts(); }
int watch_group(const std::string& name, std::vector<int> world_ranks) {
  return the_watchdog().watch(name, std::move(world_ranks));
}
void forget_group(int id) { the_watchdog().forget(id); }
uint64_t count_collective(int id) { return the_watchdog().count(id); }
bool watchdog_armed() { return the_watchdog().armed(); }

void watched_wait(int id, Collective op, uint64_t seq, FunctionRef<bool()> done) {
  if (done()) return;
  Watchdog& w = the_watchdog();
  if (!w.armed()) {
    while (!done()) {
    }
    return;
  }
  w.wait(id, op, seq, done);
}

void watched_poll(int id, Collective op, uint64_t seq, double waited_s, const std::string* failure) {
  Watchdog& w = the_watchdog();
  if (w.armed()) w.poll(Waiting{id, op, seq}, waited_s, failure);
}

void watched_failure(int id, Collective op, uint64_t seq, const std::string& what) {
  Watchdog& w = the_watchdog();
  if (w.armed()) w.failed(id, op, seq, what);
}

void on_watchdog_abort(const void* key, std::function<void()> fn) { the_watchdog().add_abort_hook(key, std::move(fn)); }
void forget_watchdog_abort(const void* key) { the_watchdog().remove_abort_hook(key); }

}  // namespace detail
}  // namespace fsdp::dist
