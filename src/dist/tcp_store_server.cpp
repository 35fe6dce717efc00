// The TCP store's server, a thread of world rank 0 (fsdp/dist/tcp_store.h): one poll() loop
// over the listening socket and every rank's connection, non-blocking, so a slow or stopped
// rank never holds up the others' gathers.
//
// The job ends (every joined rank is sent kAborted with a line and an exit code) when a rank
// asks (kAbort), when a joined rank's connection closes before its bye, when the ranks do not
// all join within the join timeout, or when a rank's join contradicts the others'. Before it
// tells rank 0 (whose process exits on the message, taking this thread with it) it flushes the
// message to every other rank, so each one logs why the job ended.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include <fmt/ranges.h>

#include "fsdp/core/error.h"
#include "fsdp/dist/tcp_store.h"
#include "store_wire.h"

namespace fsdp::dist {
namespace {

using Clock = std::chrono::steady_clock;

struct Conn {
  int fd = -1;
  wire::FrameBuffer in;
  std::string out;
  int rank = -1;  // world rank once joined
  std::string host;
  int64_t pid = 0;
  bool bye = false;
  bool closed = false;
};

struct Gather {
  int size = 0;
  std::map<int, std::string> parts;                  // group rank -> bytes
  std::vector<std::pair<int, uint64_t>> waiters;     // (fd, ticket)
};

// "world ranks 2, 3" / "world rank 2".
std::string ranks_text(const std::vector<int>& ranks) {
  return fmt::format("world rank{} {}", ranks.size() == 1 ? "" : "s", fmt::join(ranks, ", "));
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// A listening socket on every interface: IPv6 with IPv4 mapped where the host has IPv6,
// else IPv4. Throws naming the port.
int listen_on(int port, int* bound_port) {
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool v6 = fd >= 0;
  if (!v6) fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FSDP_CHECK(fd >= 0, "cannot create the TCP store's socket: {}", std::strerror(errno));
  const int one = 1, zero = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // rebind over TIME_WAIT after a restart
  int rc = 0;
  if (v6) {
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(uint16_t(port));
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(uint16_t(port));
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  if (rc != 0 || ::listen(fd, 1024) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EADDRINUSE)
      FSDP_FAIL("world rank 0 cannot host the TCP store on port {} of host {}: the port is in use (another job, or "
                "an earlier run of this one still ending); set MASTER_PORT to a free port",
                port, host_name());
    FSDP_FAIL("world rank 0 cannot host the TCP store on port {} of host {}: {}", port, host_name(),
              std::strerror(err));
  }
  sockaddr_storage s{};
  socklen_t len = sizeof s;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&s), &len);
  *bound_port = s.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&s)->sin6_port)
                                        : ntohs(reinterpret_cast<sockaddr_in*>(&s)->sin_port);
  set_nonblocking(fd);
  return fd;
}

}  // namespace

struct TcpStoreServer::State {
  StoreIdentity owner;
  double join_timeout_s = 0;
  Clock::time_point started = Clock::now();
  std::map<int, Conn> conns;  // by fd
  std::map<int, int> rank_fd;
  std::map<std::string, Gather> gathers;
  bool all_joined = false;
  bool aborting = false;
  bool acked = false;
  std::mutex mu;  // byes and the connection count, for wait_for_byes
  std::condition_variable cv;
  int byes = 0;
  int open_joined = 0;

  void queue(Conn& c, wire::Type t, const std::string& payload) {
    if (!c.closed) c.out += wire::frame(t, payload);
  }

  // Writes what is queued for c; false when its peer is gone.
  static bool flush(Conn& c) {
    while (!c.out.empty()) {
      const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (n <= 0) return false;
      c.out.erase(0, size_t(n));
    }
    return true;
  }

  // Every joined rank is told to exit with `code` after logging `line`; rank 0 last (its
  // process ends on it), the others flushed first, for at most two seconds.
  void abort_job(int code, const std::string& line, int from) {
    if (aborting) return;
    aborting = true;
    const std::string payload = wire::Writer{}.i64(code).str(line).i64(from).out;
    Conn* own = nullptr;
    for (auto& [fd, c] : conns) {
      if (c.rank < 0) continue;
      if (c.rank == owner.rank) {
        own = &c;
        continue;
      }
      queue(c, wire::kAborted, payload);
    }
    const Clock::time_point until = Clock::now() + std::chrono::seconds(2);
    while (Clock::now() < until) {
      std::vector<pollfd> fds;
      for (auto& [fd, c] : conns)
        if (c.rank >= 0 && !c.closed && !c.out.empty() && &c != own) fds.push_back({fd, POLLOUT, 0});
      if (fds.empty()) break;
      ::poll(fds.data(), fds.size(), 50);
      for (const pollfd& p : fds) {
        Conn& c = conns[p.fd];
        if (p.revents != 0 && !flush(c)) c.closed = true;
      }
    }
    if (own != nullptr) {
      queue(*own, wire::kAborted, payload);
      flush(*own);
    }
  }

  void refuse(Conn& c, int code, const std::string& line) {
    queue(c, wire::kRefused, wire::Writer{}.i64(code).str(line).out);
    flush(c);
  }

  void on_hello(Conn& c, const std::string& payload) {
    wire::Reader r{payload};
    const std::string job = r.str();
    const int64_t size = r.i64(), rank = r.i64();
    const std::string host = r.str();
    const int64_t pid = r.i64();
    if (!r.ok) {
      c.closed = true;
      return;
    }
    const std::string who = fmt::format("world rank {} (host {}, pid {})", rank, host, pid);
    if (job != owner.job) {
      refuse(c, kStoreExitUsage,
             fmt::format("{} of job '{}' reached the TCP store of job '{}' on host {}: two jobs share "
                         "MASTER_ADDR:MASTER_PORT; give each its own MASTER_PORT",
                         who, job, owner.job, owner.host));
      return;
    }
    if (aborting) {
      refuse(c, kStoreExitUsage, "the job is ending");
      return;
    }
    std::string problem;
    if (size != owner.world_size) {
      problem = fmt::format("{} was started with WORLD_SIZE={} but world rank 0 (host {}) with WORLD_SIZE={}: every "
                            "rank must be told the same number of ranks",
                            who, size, owner.host, owner.world_size);
    } else if (rank < 0 || rank >= owner.world_size) {
      problem = fmt::format("{} is outside WORLD_SIZE={}", who, owner.world_size);
    } else if (const auto it = rank_fd.find(int(rank)); it != rank_fd.end()) {
      const Conn& other = conns[it->second];
      problem = fmt::format("world rank {} joined twice: from host {} (pid {}) and host {} (pid {}); every process "
                            "needs its own RANK",
                            rank, other.host, other.pid, host, pid);
    }
    if (!problem.empty()) {
      refuse(c, kStoreExitUsage, problem);
      abort_job(kStoreExitUsage, problem, -1);
      return;
    }
    c.rank = int(rank);
    c.host = host;
    c.pid = pid;
    rank_fd[c.rank] = c.fd;
    {
      std::lock_guard<std::mutex> lock(mu);
      ++open_joined;
    }
    queue(c, wire::kWelcome, "");
    all_joined = int(rank_fd.size()) == owner.world_size;
  }

  void on_gather(Conn& c, const std::string& payload) {
    wire::Reader r{payload};
    const auto ticket = uint64_t(r.i64());
    const std::string key = r.str();
    const int64_t size = r.i64(), grank = r.i64();
    std::string data = r.str();
    if (!r.ok || size < 1 || grank < 0 || grank >= size) {
      abort_job(1, fmt::format("world rank {} sent a malformed gather to the TCP store", c.rank), c.rank);
      return;
    }
    Gather& g = gathers[key];
    if (g.size == 0) g.size = int(size);
    if (g.size != size || g.parts.count(int(grank)) != 0) {
      abort_job(1,
                fmt::format("gather '{}' on the TCP store: world rank {} joined it as rank {} of {}, which another "
                            "member contradicts (the ranks made their groups differently)",
                            key, c.rank, grank, size),
                c.rank);
      return;
    }
    g.parts[int(grank)] = std::move(data);
    g.waiters.emplace_back(c.fd, ticket);
    if (int(g.parts.size()) < g.size) return;
    for (const auto& [fd, t] : g.waiters) {
      wire::Writer w;
      w.i64(int64_t(t)).i64(g.size);
      for (const auto& [k, bytes] : g.parts) w.str(bytes);
      if (auto it = conns.find(fd); it != conns.end()) queue(it->second, wire::kGathered, w.out);
    }
    gathers.erase(key);
  }

  void on_bye(Conn& c) {
    if (c.bye) return;
    c.bye = true;
    int byes_now = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      byes_now = ++byes;
    }
    cv.notify_all();
    if (byes_now == owner.world_size && !acked) {
      acked = true;
      for (auto& [fd, other] : conns)
        if (other.rank >= 0) queue(other, wire::kByeAck, "");
    }
  }

  void handle(Conn& c, wire::Type t, const std::string& payload) {
    if (c.rank < 0 && t != wire::kHello) {  // speaks first without joining: not ours
      c.closed = true;
      return;
    }
    switch (t) {
      case wire::kHello: on_hello(c, payload); break;
      case wire::kGather:
        if (!aborting) on_gather(c, payload);
        break;
      case wire::kAbort: {
        wire::Reader r{payload};
        const int64_t code = r.i64();
        std::string line = r.str();
        if (line.empty())
          line = fmt::format("world rank {} (host {}) ended the job with exit code {} (its log says why)", c.rank,
                             c.host, code);
        abort_job(int(code), line, c.rank);
        break;
      }
      case wire::kWatchdogSend: {
        wire::Reader r{payload};
        const int64_t to = r.i64();
        std::string body = r.str();
        if (auto it = rank_fd.find(int(to)); r.ok && it != rank_fd.end())
          queue(conns[it->second], wire::kWatchdogRecv, wire::Writer{}.i64(c.rank).str(body).out);
        break;
      }
      case wire::kBye: on_bye(c); break;
      default: c.closed = true;
    }
  }

  // A connection closed: a joined rank that had not said bye left the job.
  void on_closed(Conn& c) {
    if (c.rank >= 0) {
      rank_fd.erase(c.rank);
      {
        std::lock_guard<std::mutex> lock(mu);
        --open_joined;
      }
      cv.notify_all();
      if (!c.bye)
        abort_job(kStoreExitPeerFailure,
                  fmt::format("world rank {} (host {}, pid {}) left the job without finishing: its connection to the "
                              "TCP store closed (the process died or was killed, or its node failed)",
                              c.rank, c.host, c.pid),
                  c.rank);
    }
    ::close(c.fd);
  }

  void check_join_deadline() {
    if (all_joined || aborting || join_timeout_s <= 0) return;
    if (Clock::now() - started < std::chrono::duration<double>(join_timeout_s)) return;
    std::vector<int> missing, present;
    std::set<std::string> hosts;
    for (int r = 0; r < owner.world_size; ++r) {
      if (rank_fd.count(r) == 0) {
        missing.push_back(r);
      } else {
        present.push_back(r);
        hosts.insert(conns[rank_fd[r]].host);
      }
    }
    abort_job(kStoreExitPeerFailure,
              fmt::format("{} never joined the TCP store on host {} within {:g} s (dist.timeout_s); {} of {} did "
                          "(on {}): a node that did not start, or a launch with fewer processes than WORLD_SIZE",
                          ranks_text(missing), owner.host, join_timeout_s, present.size(), owner.world_size,
                          fmt::join(hosts, ", ")),
              -1);
  }
};

TcpStoreServer::TcpStoreServer(int port, StoreIdentity owner, double join_timeout_s) : state_(new State) {
  state_->owner = std::move(owner);
  state_->join_timeout_s = join_timeout_s;
  listen_fd_ = listen_on(port, &port_);
  if (::pipe2(wake_fd_, O_CLOEXEC) != 0) {
    ::close(listen_fd_);
    FSDP_FAIL("cannot create the TCP store's wake-up pipe: {}", std::strerror(errno));
  }
  thread_ = std::thread([this] { loop(); });
}

TcpStoreServer::~TcpStoreServer() {
  if (thread_.joinable()) {
    const char x = 1;
    (void)!::write(wake_fd_[1], &x, 1);
    thread_.join();
  }
  for (auto& [fd, c] : state_->conns) ::close(fd);
  ::close(listen_fd_);
  ::close(wake_fd_[0]);
  ::close(wake_fd_[1]);
}

void TcpStoreServer::wait_for_byes(double timeout_s) {
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] {
    return state_->byes >= state_->owner.world_size || state_->open_joined <= 0;
  });
}

void TcpStoreServer::loop() {
  State& s = *state_;
  std::vector<pollfd> fds;
  char buf[1 << 16];
  while (true) {
    fds.clear();
    fds.push_back({wake_fd_[0], POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (auto& [fd, c] : s.conns) fds.push_back({fd, short(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
    ::poll(fds.data(), fds.size(), 200);
    if (fds[0].revents != 0) return;
    if (fds[1].revents & POLLIN) {
      while (true) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        s.conns[fd].fd = fd;
      }
    }
    for (size_t k = 2; k < fds.size(); ++k) {
      auto it = s.conns.find(fds[k].fd);
      if (it == s.conns.end()) continue;
      Conn& c = it->second;
      if (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) {
        while (!c.closed) {
          const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
          if (n > 0) {
            c.in.append(buf, size_t(n));
            continue;
          }
          if (n < 0 && errno == EINTR) continue;
          if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
          c.closed = true;  // EOF or error
        }
        wire::Type t{};
        std::string payload;
        bool bad = false;
        while (c.in.pop(&t, &payload, &bad)) s.handle(c, t, payload);
        if (bad) c.closed = true;
      }
    }
    for (auto& [fd, c] : s.conns)
      if (!c.closed && !c.out.empty() && !State::flush(c)) c.closed = true;
    for (auto it = s.conns.begin(); it != s.conns.end();) {
      if (it->second.closed) {
        s.on_closed(it->second);
        it = s.conns.erase(it);
      } else {
        ++it;
      }
    }
    s.check_join_deadline();
  }
}

}  // namespace fsdp::dist
