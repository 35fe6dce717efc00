// The emulated NCCL's TCP transport; see nccl_tcp.h.
#include "nccl_tcp.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>

namespace fsdp_emu {
namespace {

constexpr uint64_t kHelloMagic = 0x6e63636c54435031ull;  // "NCCLTCP1"
constexpr uint64_t kPairMagic = 0x6e63636c50414952ull;   // "ncclPAIR": a pair socket's first message
constexpr uint64_t kP2pMagic = 0x6e63636c50325031ull;    // "ncclP2P1": a point-to-point message's header
constexpr int kJoinSeconds = 300;  // members that never come: NCCL's init would block forever

std::mutex g_mu;
std::map<uint64_t, int> g_listeners;  // id sequence number -> listening socket of this process

struct Hello {
  uint64_t magic, seq;
  int32_t nranks, rank;
  int32_t pair_port, unused;  // where the member accepts its pair sockets
};
struct PairHello {
  uint64_t magic, seq;
  int32_t rank, unused;
};
struct Ack {
  int32_t ok;
  char why[220];
};
struct Header {
  uint64_t seq;
  uint32_t op;
  uint64_t bytes;
};

void nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Moves n bytes on a non-blocking socket, polling every millisecond: the wait hook runs
// between polls and an abort ends the wait. deadline_s < 0: none.
bool io(int fd, void* buf, size_t n, bool out, void (*hook)(), const std::atomic<bool>* aborted, double deadline_s,
        std::string* why) {
  auto* p = static_cast<char*>(buf);
  const auto t0 = std::chrono::steady_clock::now();
  while (n > 0) {
    const ssize_t k = out ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (k > 0) {
      p += k;
      n -= size_t(k);
      continue;
    }
    if (k == 0 && !out) {
      *why = "a peer of the clique closed its connection (its process ended)";
      return false;
    }
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      *why = std::string("socket error: ") + std::strerror(errno);
      return false;
    }
    pollfd pf{fd, short(out ? POLLOUT : POLLIN), 0};
    ::poll(&pf, 1, 1);
    if (hook != nullptr) hook();
    if (aborted != nullptr && aborted->load()) {
      *why = "aborted";
      return false;
    }
    if (deadline_s >= 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > deadline_s) {
      *why = "timed out";
      return false;
    }
  }
  return true;
}

// A socket listening on the loopback interface (the emulator's processes share one machine),
// and its port; -1 with *why when it cannot be opened.
int listen_loopback(uint16_t* port, std::string* why) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 256) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    *why = std::string("cannot open the clique's socket: ") + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

// Closes a listening socket when join() returns, however it returns.
struct Closer {
  int fd;
  ~Closer() {
    if (fd >= 0) ::close(fd);
  }
};

const char* op_name(uint32_t op) {
  switch (TcpOp(op)) {
    case TcpOp::AllGather: return "ncclAllGather";
    case TcpOp::ReduceScatter: return "ncclReduceScatter";
    case TcpOp::AllReduce: return "ncclAllReduce";
    case TcpOp::Broadcast: return "ncclBroadcast";
  }
  return "?";
}

}  // namespace

bool tcp_listen(uint64_t seq, TcpId* id, std::string* why) {
  const int fd = listen_loopback(&id->port, why);
  if (fd < 0) return false;
  id->ipv4 = htonl(INADDR_LOOPBACK);
  std::lock_guard<std::mutex> lock(g_mu);
  g_listeners[seq] = fd;
  return true;
}

TcpClique* TcpClique::join(int nranks, int rank, int32_t root_pid, uint64_t seq, const TcpId& id, std::string* why) {
  auto* c = new TcpClique;
  c->nranks_ = nranks;
  c->rank_ = rank;
  // Every member's pair sockets' port, by rank (the hub learns them from the hellos).
  std::vector<uint16_t> ports(static_cast<size_t>(nranks), 0);
  const Closer pair_listener{listen_loopback(&ports[size_t(rank)], why)};
  if (pair_listener.fd < 0) {
    delete c;
    return nullptr;
  }
  int listener = -1;
  if (root_pid == int32_t(::getpid())) {
    std::lock_guard<std::mutex> lock(g_mu);
    if (auto it = g_listeners.find(seq); it != g_listeners.end()) {
      listener = it->second;
      g_listeners.erase(it);
    }
  }
  c->hub_ = listener >= 0;
  if (c->hub_) {
    c->fds_.assign(size_t(nranks), -1);
    std::string problem;
    for (int joined = 1; joined < nranks; ++joined) {
      pollfd pf{listener, POLLIN, 0};
      if (::poll(&pf, 1, kJoinSeconds * 1000) != 1) {
        *why = "the other members did not join within " + std::to_string(kJoinSeconds) + " s";
        ::close(listener);
        delete c;
        return nullptr;
      }
      const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      Hello h{};
      std::string err;
      nonblocking(fd);
      if (!io(fd, &h, sizeof h, false, nullptr, nullptr, kJoinSeconds, &err) || h.magic != kHelloMagic) {
        ::close(fd);
        --joined;
        continue;
      }
      if (h.seq != seq || h.nranks != nranks || h.rank < 0 || h.rank >= nranks || h.rank == rank ||
          c->fds_[size_t(h.rank)] >= 0) {
        problem = "a process joined as rank " + std::to_string(h.rank) + " of " + std::to_string(h.nranks) +
                  ", but this clique has " + std::to_string(nranks) + " ranks and that rank is " +
                  (h.rank >= 0 && h.rank < nranks ? "taken" : "out of range");
      } else {
        c->fds_[size_t(h.rank)] = fd;
        ports[size_t(h.rank)] = uint16_t(h.pair_port);
      }
      if (!problem.empty()) ::close(fd);
    }
    ::close(listener);
    Ack ack{};
    ack.ok = problem.empty();
    std::strncpy(ack.why, problem.c_str(), sizeof ack.why - 1);
    for (int fd : c->fds_) {
      std::string err;
      if (fd >= 0 && io(fd, &ack, sizeof ack, true, nullptr, nullptr, kJoinSeconds, &err) && ack.ok)
        io(fd, ports.data(), ports.size() * sizeof(uint16_t), true, nullptr, nullptr, kJoinSeconds, &err);
    }
    if (!problem.empty()) {
      *why = problem;
      delete c;
      return nullptr;
    }
  } else {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = id.ipv4;
    a.sin_port = htons(id.port);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      *why = std::string("cannot reach the process that made the id: ") + std::strerror(errno);
      if (fd >= 0) ::close(fd);
      delete c;
      return nullptr;
    }
    nonblocking(fd);
    const Hello h{kHelloMagic, seq, nranks, rank, ports[size_t(rank)], 0};
    Ack ack{};
    std::string err;
    if (!io(fd, const_cast<Hello*>(&h), sizeof h, true, nullptr, nullptr, kJoinSeconds, &err) ||
        !io(fd, &ack, sizeof ack, false, nullptr, nullptr, kJoinSeconds, &err)) {
      *why = "joining the clique: " + err;
      ::close(fd);
      delete c;
      return nullptr;
    }
    if (!ack.ok) {
      *why = std::string("the ranks joining this commId disagree: ") + ack.why;
      ::close(fd);
      delete c;
      return nullptr;
    }
    c->fds_ = {fd};
    if (!io(fd, ports.data(), ports.size() * sizeof(uint16_t), false, nullptr, nullptr, kJoinSeconds, &err)) {
      *why = "joining the clique: " + err;
      delete c;
      return nullptr;
    }
  }
  if (!c->connect_pairs(pair_listener.fd, ports, seq, why)) {
    delete c;
    return nullptr;
  }
  for (int fd : c->fds_)
    if (fd >= 0) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
  return c;
}

// Connects to every member below this one and accepts every member above: a connect
// completes in the listener's backlog, so no member waits for another's accept.
bool TcpClique::connect_pairs(int listener, const std::vector<uint16_t>& ports, uint64_t seq, std::string* why) {
  pair_fds_.assign(size_t(nranks_), -1);
  sends_.assign(size_t(nranks_), {});
  recvs_.assign(size_t(nranks_), {});
  std::string err;
  for (int q = 0; q < rank_; ++q) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(ports[size_t(q)]);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      *why = "cannot reach member " + std::to_string(q) + "'s pair socket: " + std::strerror(errno);
      if (fd >= 0) ::close(fd);
      return false;
    }
    pair_fds_[size_t(q)] = fd;
    nonblocking(fd);
    const PairHello h{kPairMagic, seq, rank_, 0};
    if (!io(fd, const_cast<PairHello*>(&h), sizeof h, true, nullptr, nullptr, kJoinSeconds, &err)) {
      *why = "connecting to member " + std::to_string(q) + ": " + err;
      return false;
    }
  }
  for (int k = rank_ + 1; k < nranks_; ++k) {
    pollfd pf{listener, POLLIN, 0};
    if (::poll(&pf, 1, kJoinSeconds * 1000) != 1) {
      *why = "the members above rank " + std::to_string(rank_) + " did not connect within " +
             std::to_string(kJoinSeconds) + " s";
      return false;
    }
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      --k;
      continue;
    }
    nonblocking(fd);
    PairHello h{};
    if (!io(fd, &h, sizeof h, false, nullptr, nullptr, kJoinSeconds, &err) || h.magic != kPairMagic) {
      ::close(fd);  // not one of ours
      --k;
      continue;
    }
    if (h.seq != seq || h.rank <= rank_ || h.rank >= nranks_ || pair_fds_[size_t(h.rank)] >= 0) {
      *why = "a pair socket from rank " + std::to_string(h.rank) + " does not belong to this clique";
      ::close(fd);
      return false;
    }
    pair_fds_[size_t(h.rank)] = fd;
  }
  for (int fd : pair_fds_)
    if (fd >= 0) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
  return true;
}

TcpClique::~TcpClique() {
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
  for (int fd : pair_fds_)
    if (fd >= 0) ::close(fd);
}

bool TcpClique::run(TcpOp op, int type, int red_op, int root, const void* send, size_t send_bytes, void* recv,
                    size_t recv_bytes, size_t elem_bytes, Combine combine, void (*wait_hook)(),
                    const std::atomic<bool>& aborted, std::string* why) {
  ++seq_;
  // What each member contributes: a broadcast's non-roots nothing.
  const auto contribution = [&](int member) -> size_t {
    return op == TcpOp::Broadcast && member != root ? 0 : send_bytes;
  };
  if (!hub_) {
    const Header h{seq_, uint32_t(op), contribution(rank_)};
    Header back{};
    const int fd = fds_[0];
    if (!io(fd, const_cast<Header*>(&h), sizeof h, true, wait_hook, &aborted, -1, why) ||
        !io(fd, const_cast<void*>(send), h.bytes, true, wait_hook, &aborted, -1, why) ||
        !io(fd, &back, sizeof back, false, wait_hook, &aborted, -1, why))
      return false;
    if (back.seq != seq_ || back.op != uint32_t(op) || back.bytes != recv_bytes) {
      *why = std::string("this rank issued ") + op_name(uint32_t(op)) + " #" + std::to_string(seq_) +
             " but the clique's hub answered " + op_name(back.op) + " #" + std::to_string(back.seq);
      return false;
    }
    return io(fd, recv, recv_bytes, false, wait_hook, &aborted, -1, why);
  }
  // The hub: every member's contribution, in rank order.
  std::vector<std::vector<char>> parts(static_cast<size_t>(nranks_));
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_) {
      parts[size_t(r)].assign(static_cast<const char*>(send), static_cast<const char*>(send) + contribution(r));
      continue;
    }
    Header h{};
    if (!io(fds_[size_t(r)], &h, sizeof h, false, wait_hook, &aborted, -1, why)) return false;
    if (h.seq != seq_ || h.op != uint32_t(op) || h.bytes != contribution(r)) {
      *why = "rank " + std::to_string(r) + " issued " + op_name(h.op) + " #" + std::to_string(h.seq) + " of " +
             std::to_string(h.bytes) + " bytes, but this rank " + op_name(uint32_t(op)) + " #" + std::to_string(seq_) +
             " of " + std::to_string(contribution(r)) + " bytes: the ranks issued different collectives";
      return false;
    }
    parts[size_t(r)].resize(h.bytes);
    if (!io(fds_[size_t(r)], parts[size_t(r)].data(), h.bytes, false, wait_hook, &aborted, -1, why)) return false;
  }
  // The result for member r: all of `result` or its block.
  std::vector<char> result;
  if (op == TcpOp::AllGather) {
    for (const auto& p : parts) result.insert(result.end(), p.begin(), p.end());
  } else if (op == TcpOp::Broadcast) {
    result = parts[size_t(root)];
  } else {
    result = parts[0];
    for (int r = 1; r < nranks_; ++r) combine(parts[size_t(r)].data(), result.data(), result.size() / elem_bytes, type, red_op);
  }
  const size_t block = op == TcpOp::ReduceScatter ? recv_bytes : 0;
  for (int r = 0; r < nranks_; ++r) {
    const char* mine = result.data() + size_t(r) * block;
    if (r == rank_) {
      std::memcpy(recv, mine, recv_bytes);
      continue;
    }
    const Header h{seq_, uint32_t(op), recv_bytes};
    if (!io(fds_[size_t(r)], const_cast<Header*>(&h), sizeof h, true, wait_hook, &aborted, -1, why) ||
        !io(fds_[size_t(r)], const_cast<char*>(mine), recv_bytes, true, wait_hook, &aborted, -1, why))
      return false;
  }
  return true;
}

void TcpClique::p2p_start(const std::vector<TcpP2p>& ops) {
  for (const TcpP2p& op : ops) {
    Pending p{static_cast<char*>(op.buf), op.bytes};
    if (op.send) {
      p.header[0] = kP2pMagic;
      p.header[1] = op.bytes;
      sends_[size_t(op.peer)].push_back(p);
    } else {
      recvs_[size_t(op.peer)].push_back(p);
    }
  }
}

void TcpClique::p2p_clear() {
  for (auto& d : sends_) d.clear();
  for (auto& d : recvs_) d.clear();
}

// Sends, then receives, on the socket to `peer` until it would block.
bool TcpClique::p2p_move(int peer, bool* moved, std::string* why, std::string* mismatch) {
  constexpr size_t kHeader = sizeof(Pending::header);
  const int fd = pair_fds_[size_t(peer)];
  const std::string who = "rank " + std::to_string(peer);
  auto& sends = sends_[size_t(peer)];
  bool blocked = false;
  while (!sends.empty() && !blocked) {
    Pending& p = sends.front();
    const size_t total = kHeader + p.bytes;
    while (p.done < total) {
      const bool head = p.done < kHeader;
      const char* from = head ? reinterpret_cast<const char*>(p.header) + p.done : p.buf + (p.done - kHeader);
      const ssize_t k = ::send(fd, from, (head ? kHeader : total) - p.done, MSG_NOSIGNAL);
      if (k > 0) {
        p.done += size_t(k);
        *moved = true;
      } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        blocked = true;
        break;
      } else {
        *why = "sending to " + who + ": " + std::strerror(errno);
        return false;
      }
    }
    if (!blocked) sends.pop_front();
  }
  auto& recvs = recvs_[size_t(peer)];
  char surplus[4096];  // what a longer message than the receive's length brings, dropped
  blocked = false;
  while (!recvs.empty() && !blocked) {
    Pending& p = recvs.front();
    while (true) {
      char* to = reinterpret_cast<char*>(p.header) + p.done;
      size_t n = kHeader - p.done;
      if (p.done >= kHeader) {
        const size_t at = p.done - kHeader, length = size_t(p.header[1]);
        if (at >= length) break;
        to = at < p.bytes ? p.buf + at : surplus;
        n = at < p.bytes ? std::min(length, p.bytes) - at : std::min(sizeof surplus, length - at);
      }
      const ssize_t k = ::recv(fd, to, n, 0);
      if (k == 0) {
        *why = who + " closed its connection (its process ended)";
        return false;
      }
      if (k < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
          blocked = true;
          break;
        }
        *why = "receiving from " + who + ": " + std::strerror(errno);
        return false;
      }
      p.done += size_t(k);
      *moved = true;
      if (p.done == kHeader) {
        if (p.header[0] != kP2pMagic) {
          *why = who + " sent something other than a point-to-point message";
          return false;
        }
        if (p.header[1] != p.bytes && mismatch->empty())
          *mismatch =
              who + " sent " + std::to_string(p.header[1]) + " bytes to a receive of " + std::to_string(p.bytes);
      }
    }
    if (!blocked) recvs.pop_front();
  }
  return true;
}

TcpClique::Progress TcpClique::p2p_progress(int timeout_ms, std::string* why, std::string* mismatch) {
  bool moved = false;
  std::vector<pollfd> waiting;
  for (int q = 0; q < nranks_; ++q) {
    if (sends_[size_t(q)].empty() && recvs_[size_t(q)].empty()) continue;
    if (!p2p_move(q, &moved, why, mismatch)) return Progress::Failed;
    const short events = short((sends_[size_t(q)].empty() ? 0 : POLLOUT) | (recvs_[size_t(q)].empty() ? 0 : POLLIN));
    if (events != 0) waiting.push_back(pollfd{pair_fds_[size_t(q)], events, 0});
  }
  if (waiting.empty()) return Progress::Done;
  if (!moved && timeout_ms > 0) ::poll(waiting.data(), waiting.size(), timeout_ms);
  return Progress::Running;
}

}  // namespace fsdp_emu
