// The emulated NCCL's TCP transport; see nccl_tcp.h.
#include "nccl_tcp.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>

namespace fsdp_emu {
namespace {

constexpr uint64_t kHelloMagic = 0x6e63636c54435031ull;  // "NCCLTCP1"
constexpr int kJoinSeconds = 300;  // members that never come: NCCL's init would block forever

std::mutex g_mu;
std::map<uint64_t, int> g_listeners;  // id sequence number -> listening socket of this process

struct Hello {
  uint64_t magic, seq;
  int32_t nranks, rank;
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
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);  // the emulator's processes share one machine
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 256) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    *why = std::string("cannot open the clique's socket: ") + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return false;
  }
  id->port = ntohs(a.sin_port);
  id->ipv4 = a.sin_addr.s_addr;
  std::lock_guard<std::mutex> lock(g_mu);
  g_listeners[seq] = fd;
  return true;
}

TcpClique* TcpClique::join(int nranks, int rank, int32_t root_pid, uint64_t seq, const TcpId& id, std::string* why) {
  auto* c = new TcpClique;
  c->nranks_ = nranks;
  c->rank_ = rank;
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
          c->fds_[size_t(h.rank)] >= 0)
        problem = "a process joined as rank " + std::to_string(h.rank) + " of " + std::to_string(h.nranks) +
                  ", but this clique has " + std::to_string(nranks) + " ranks and that rank is " +
                  (h.rank >= 0 && h.rank < nranks ? "taken" : "out of range");
      else
        c->fds_[size_t(h.rank)] = fd;
      if (!problem.empty()) ::close(fd);
    }
    ::close(listener);
    Ack ack{};
    ack.ok = problem.empty();
    std::strncpy(ack.why, problem.c_str(), sizeof ack.why - 1);
    for (int fd : c->fds_) {
      std::string err;
      if (fd >= 0) io(fd, &ack, sizeof ack, true, nullptr, nullptr, kJoinSeconds, &err);
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
    const Hello h{kHelloMagic, seq, nranks, rank};
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
  }
  for (int fd : c->fds_)
    if (fd >= 0) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
  return c;
}

TcpClique::~TcpClique() {
  for (int fd : fds_)
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

}  // namespace fsdp_emu
