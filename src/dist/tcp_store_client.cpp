// The TCP store's client, one per rank (fsdp/dist/tcp_store.h): a blocking socket, written
// under a mutex by whoever sends, read by a thread of its own that files answers by ticket,
// queues relayed watchdog messages and ends the process when the job ends under it.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "fsdp/core/error.h"
#include "fsdp/dist/tcp_store.h"
#include "store_wire.h"

namespace fsdp::dist {
namespace {

using Clock = std::chrono::steady_clock;

void default_abort(int exit_code, const std::string& line) {
  if (!line.empty()) std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(exit_code);
}

// One connection attempt to any address of host:port, for at most `budget`; -1 with *why set.
int try_connect(const std::string& host, int port, std::chrono::milliseconds budget, std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) {
    *why = fmt::format("cannot resolve host {}: {}", host, gai_strerror(rc));
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      *why = std::strerror(errno);
      ::close(fd);
      fd = -1;
      continue;
    }
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof err;
    if (::poll(&p, 1, int(budget.count())) != 1 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 ||
        err != 0) {
      *why = err != 0 ? std::strerror(err) : "no answer";
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd >= 0) {
    const int flags = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &flags, sizeof flags);
    const int blocking = ::fcntl(fd, F_GETFL) & ~O_NONBLOCK;
    ::fcntl(fd, F_SETFL, blocking);
  }
  return fd;
}

}  // namespace

TcpStoreClient::TcpStoreClient(const std::string& host, int port, StoreIdentity me, double timeout_s,
                               AbortHandler on_abort)
    : me_(std::move(me)), host_(host), port_(port), on_abort_(on_abort ? std::move(on_abort) : &default_abort) {
  const Clock::time_point t0 = Clock::now();
  const auto over = [&] { return timeout_s > 0 && Clock::now() - t0 >= std::chrono::duration<double>(timeout_s); };
  std::string why;
  while ((fd_ = try_connect(host_, port_, std::chrono::milliseconds(2000), &why)) < 0) {
    if (over()) {
      const std::string line = fmt::format(
          "world rank {} found no TCP store at {} within {:g} s (dist.timeout_s): world rank 0 did not open it (see "
          "its log: it may have failed to start, or MASTER_ADDR/MASTER_PORT point elsewhere); last attempt: {}",
          me_.rank, address(), timeout_s, why);
      on_abort_(kStoreExitPeerFailure, line);
      FSDP_FAIL("{}", line);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  reader_ = std::thread([this] { reader(); });
  send_frame(wire::kHello, wire::Writer{}.str(me_.job).i64(me_.world_size).i64(me_.rank).str(me_.host).i64(me_.pid).out);
  // The answer: kWelcome, or kRefused (reader() has then called the handler).
  std::unique_lock<std::mutex> lock(mu_);
  const bool answered = cv_.wait_for(lock, std::chrono::duration<double>(timeout_s > 0 ? timeout_s : 1e9),
                                     [&] { return joined_ || dead_; });
  if (dead_ || !answered) {
    const bool refused = dead_;
    const std::string line =
        refused ? dead_line_
                : fmt::format("world rank {}: the TCP store at {} accepted the connection but did not answer within "
                              "{:g} s (dist.timeout_s)",
                              me_.rank, address(), timeout_s);
    closing_ = true;
    lock.unlock();
    if (!refused) on_abort_(kStoreExitPeerFailure, line);
    // A constructor that throws gets no destructor: the reader must be gone first.
    ::shutdown(fd_, SHUT_RDWR);
    reader_.join();
    ::close(fd_);
    fd_ = -1;
    FSDP_FAIL("{}", line);
  }
}

TcpStoreClient::~TcpStoreClient() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  if (reader_.joinable()) reader_.join();
  if (fd_ >= 0) ::close(fd_);
}

std::string TcpStoreClient::address() const { return wire::address(host_, port_); }

void TcpStoreClient::send_frame(int type, const std::string& payload) {
  std::lock_guard<std::mutex> lock(write_mu_);
  (void)wire::write_all(fd_, wire::frame(wire::Type(type), payload));  // a dead peer shows in reader()
}

void TcpStoreClient::failed(int exit_code, const std::string& line) {
  dead_ = true;
  dead_line_ = line;
  exit_code_ = exit_code;
}

void TcpStoreClient::check_alive() const {
  if (dead_) FSDP_FAIL("{}", dead_line_);
}

void TcpStoreClient::reader() {
  wire::FrameBuffer in;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) {
      in.append(buf, size_t(n));
      wire::Type t{};
      std::string payload;
      bool bad = false;
      while (in.pop(&t, &payload, &bad)) {
        wire::Reader r{payload};
        if (t == wire::kWelcome) {
          std::lock_guard<std::mutex> lock(mu_);
          joined_ = true;
        } else if (t == wire::kGathered) {
          const auto ticket = uint64_t(r.i64());
          const int64_t count = r.i64();
          std::vector<std::string> parts;
          for (int64_t k = 0; k < count && r.ok; ++k) parts.push_back(r.str());
          std::lock_guard<std::mutex> lock(mu_);
          answers_[ticket] = std::move(parts);
        } else if (t == wire::kWatchdogRecv) {
          const int64_t from = r.i64();
          std::string body = r.str();
          std::lock_guard<std::mutex> lock(mu_);
          inbox_.emplace_back(int(from), std::move(body));
        } else if (t == wire::kByeAck) {
          std::lock_guard<std::mutex> lock(mu_);
          bye_acked_ = true;
        } else if (t == wire::kAborted || t == wire::kRefused) {
          const int64_t code = r.i64();
          std::string line = r.str();
          const int64_t from = t == wire::kAborted ? r.i64() : -1;
          if (from == me_.rank) line.clear();  // this rank asked, and has said why already
          end(int(code), line);
          return;
        }
        cv_.notify_all();
      }
      if (bad) {
        end(kStoreExitUsage,
            fmt::format("world rank {}: {} does not speak fsdp_train's TCP store protocol: another service holds "
                        "MASTER_PORT on that host; set MASTER_PORT to a free port",
                        me_.rank, address()));
        return;
      }
      continue;
    }
    // The connection closed.
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closing_ || bye_acked_) return;
    }
    end(kStoreExitPeerFailure,
        fmt::format("world rank 0 (host {}), which hosts the TCP store at {}, is gone: world rank {}'s connection "
                    "closed (rank 0 died or was killed, or its node failed)",
                    rank0_host_.empty() ? host_ : rank0_host_, address(), me_.rank));
    return;
  }
}

void TcpStoreClient::end(int exit_code, const std::string& line) {
  // The handler first: fsdp_train's logs the line and exits, and no waiting thread may wake
  // to fail on its own and exit first (with another code, under the handler's feet).
  on_abort_(exit_code, line);
  {
    std::lock_guard<std::mutex> lock(mu_);
    failed(exit_code, line.empty() ? fmt::format("the job ended with exit code {}", exit_code) : line);
  }
  cv_.notify_all();
}

std::vector<std::string> TcpStoreClient::join_all() {
  std::vector<std::string> hosts = gather_now("join", me_.world_size, me_.rank, me_.host);
  std::lock_guard<std::mutex> lock(mu_);
  rank0_host_ = hosts.at(0);
  return hosts;
}

uint64_t TcpStoreClient::gather(const std::string& key, int group_size, int group_rank, std::string data) {
  uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    check_alive();
    ticket = next_ticket_++;
  }
  send_frame(wire::kGather, wire::Writer{}.i64(int64_t(ticket)).str(key).i64(group_size).i64(group_rank).str(data).out);
  return ticket;
}

bool TcpStoreClient::ready(uint64_t ticket, std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, wait, [&] { return answers_.count(ticket) != 0 || dead_; });
  check_alive();
  return answers_.count(ticket) != 0;
}

std::vector<std::string> TcpStoreClient::take(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  check_alive();
  auto it = answers_.find(ticket);
  FSDP_CHECK(it != answers_.end(), "TCP store: gather ticket {} has no answer yet", ticket);
  std::vector<std::string> parts = std::move(it->second);
  answers_.erase(it);
  return parts;
}

std::vector<std::string> TcpStoreClient::gather_now(const std::string& key, int group_size, int group_rank,
                                                    std::string data) {
  const uint64_t ticket = gather(key, group_size, group_rank, std::move(data));
  while (!ready(ticket, std::chrono::milliseconds(100))) {
  }
  return take(ticket);
}

void TcpStoreClient::send_to(int world_rank, std::string payload) {
  send_frame(wire::kWatchdogSend, wire::Writer{}.i64(world_rank).str(payload).out);
}

bool TcpStoreClient::receive(int* from, std::string* payload) {
  std::lock_guard<std::mutex> lock(mu_);
  if (inbox_.empty()) return false;
  *from = inbox_.front().first;
  *payload = std::move(inbox_.front().second);
  inbox_.pop_front();
  return true;
}

void TcpStoreClient::abort(int exit_code, const std::string& line) {
  send_frame(wire::kAbort, wire::Writer{}.i64(exit_code).str(line).out);
  // The server's kAborted ends this process in reader(); if the server is gone it never comes.
  std::unique_lock<std::mutex> lock(mu_);
  if (cv_.wait_for(lock, std::chrono::seconds(5), [&] { return dead_; })) return;
  lock.unlock();
  on_abort_(exit_code, line);
}

void TcpStoreClient::bye(double timeout_s) {
  send_frame(wire::kBye, "");
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return bye_acked_ || dead_; });
  closing_ = true;
}

}  // namespace fsdp::dist
