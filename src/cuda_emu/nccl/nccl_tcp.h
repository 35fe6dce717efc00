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
// FSDP_EMU_NCCL_TRANSPORT=tcp picks it even where MPI is up (a test compares the two
// bootstraps over one transport).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
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

 private:
  TcpClique() = default;
  int nranks_ = 1, rank_ = 0;
  bool hub_ = false;
  std::vector<int> fds_;  // hub: fds_[r] is member r (-1 for itself); others: fds_[0] is the hub
  uint64_t seq_ = 0;
};

}  // namespace fsdp_emu
