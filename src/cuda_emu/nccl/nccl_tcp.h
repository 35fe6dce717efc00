// The emulated NCCL's second transport (src/cuda_emu/nccl/nccl.cpp): TCP sockets between the
// processes of a clique, for processes that never initialised MPI (a job launched through
// fsdp_train's TCP store: torchrun-style variables, or srun without --mpi), as real NCCL
// builds its own connections from the unique id whatever bootstrapped the processes.
//
// The id names the process that made it and the port it listens on; that process (the hub)
// accepts the other members in ncclCommInitRank. A collective is a star through the hub:
// every other member sends its contribution, the hub combines them in rank order (float16 and
// bfloat16 in float32, rounded once per combination, as NCCL does) and sends each member its
// result. Each message carries the collective's sequence number, kind and size, so members
// that issue different collectives fail with ncclInvalidUsage instead of misreading.
//
// Point-to-point operations (ncclSend / ncclRecv, nccl_p2p.cpp) go straight between the two
// members, as NCCL's do, over a second set of sockets, one per pair of members, made when the
// clique is joined (every member listens, the hub hands out the ports, and each member
// connects to the members below it and accepts those above). A group's operations are
// progressed together without blocking, sending and receiving on every pair's socket at once,
// so two members that send each other more than a socket buffers do not wait for each other.
// Each message is a header (its length) and the bytes; a receive takes the next message from
// its peer, so the two sides match in the order they were issued.
// FSDP_EMU_NCCL_TRANSPORT=tcp picks it even where MPI is up (a test compares the two
// bootstraps over one transport).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace fsdp_emu {

// The hub's side of an id: a listening socket, kept from ncclGetUniqueId to ncclCommInitRank.
struct TcpId {
  uint16_t port = 0;
  uint32_t ipv4 = 0;  // network order
};
// Opens the hub's socket for the id with sequence number seq; false with *why when it cannot.
bool tcp_listen(uint64_t seq, TcpId* id, std::string* why);

enum class TcpOp : uint32_t { AllGather = 1, ReduceScatter, AllReduce, Broadcast };

// One point-to-point operation: `bytes` to or from member `peer` (never this member).
struct TcpP2p {
  bool send;
  int peer;
  void* buf;
  size_t bytes;
};

// Combines `in` into `inout` (count elements of one NCCL datatype) with one NCCL reduction op.
using Combine = void (*)(const void* in, void* inout, size_t count, int type, int op);

class TcpClique {
 public:
  // Collective over the clique's members: joins the clique of the id made by the process with
  // pid root_pid (seq: its sequence number). Returns nullptr with *why on failure.
  static TcpClique* join(int nranks, int rank, int32_t root_pid, uint64_t seq, const TcpId& id, std::string* why);
  ~TcpClique();

  // The collective `op` on this member: `send` (send_bytes) in, `recv` (recv_bytes) out.
  // Broadcast: only the root sends. wait_hook is called every millisecond while waiting;
  // aborted() ends the wait. False with *why on failure (a peer gone, a mismatched call).
  bool run(TcpOp op, int type, int red_op, int root, const void* send, size_t send_bytes, void* recv,
           size_t recv_bytes, size_t elem_bytes, Combine combine, void (*wait_hook)(), const std::atomic<bool>& aborted,
           std::string* why);

  // Queues a group's point-to-point operations, to be moved by p2p_progress.
  void p2p_start(const std::vector<TcpP2p>& ops);
  enum class Progress { Running, Done, Failed };
  // Moves what the pair sockets take without blocking; when nothing moved, waits up to
  // timeout_ms for a socket to become ready. Failed: *why (a peer gone, a garbled message).
  // A receive whose peer sent another length still completes (the message is consumed, the
  // surplus dropped) and says so in *mismatch, the first such only.
  Progress p2p_progress(int timeout_ms, std::string* why, std::string* mismatch);
  // Forgets the queued operations (the group was abandoned).
  void p2p_clear();

 private:
  TcpClique() = default;
  bool connect_pairs(int listener, const std::vector<uint16_t>& ports, uint64_t seq, std::string* why);

  // A point-to-point operation in flight: `done` counts the header's bytes, then the data's.
  struct Pending {
    char* buf;
    size_t bytes;
    size_t done = 0;
    uint64_t header[2] = {0, 0};  // magic, the data's length
  };
  bool p2p_move(int peer, bool* moved, std::string* why, std::string* mismatch);

  int nranks_ = 1, rank_ = 0;
  bool hub_ = false;
  std::vector<int> fds_;  // hub: fds_[r] is member r (-1 for itself); others: fds_[0] is the hub
  uint64_t seq_ = 0;
  std::vector<int> pair_fds_;  // pair_fds_[q]: the socket to member q (-1 for itself)
  std::vector<std::deque<Pending>> sends_, recvs_;  // per peer, in issue order
};

}  // namespace fsdp_emu
