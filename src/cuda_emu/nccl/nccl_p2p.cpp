// The emulated NCCL's point-to-point calls, ncclSend and ncclRecv, and the groups they run
// in, ncclGroupStart / ncclGroupEnd (semantics: src/cuda_emu/include/nccl.h).
//
// NCCL launches a group's operations together at ncclGroupEnd and they progress concurrently
// on the GPU, so a rank may send to a peer and receive from it in one group (an all-to-all)
// without either side waiting for the other. Here a call inside a group checks its arguments
// at once (a refusal fails the call and, as in NCCL, the group: ncclGroupEnd returns that
// error and runs none of the group's operations) and is queued; the outermost ncclGroupEnd
// runs the queue. A call outside a group is a group of its own.
//
// Running a group: the stream's queued copies run first (Note [Deferred copies]: the
// operations join their streams at ncclGroupEnd, where NCCL launches them); a rank's sends to
// itself are matched with its receives from itself in issue order and copied; every other
// operation is posted at once without blocking (MPI_Issend / MPI_Irecv on the clique's MPI
// communicator, or the TCP transport's pair sockets, nccl_tcp.h) and all are progressed
// together until every one has completed, calling the wait hook every millisecond and giving
// up when a communicator is aborted meanwhile, as the collectives do. MPI keeps the order of
// the messages between two ranks on one communicator and tag, which is NCCL's rule that the
// sends and receives between two ranks match in the order they were issued; MPI_Issend
// completes only once the peer's receive has matched it, so a send that nobody receives
// keeps its group waiting, as it would on a GPU. A receive whose matching send has another
// length is ncclInvalidUsage: NCCL requires the two counts to be equal.
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "../internal.h"
#include "nccl_internal.h"
#include "nccl_tcp.h"

namespace fsdp_emu {
namespace {

// The tag of point-to-point messages on a clique's MPI communicator; its collectives match
// apart from them (MPI keeps collective and point-to-point traffic separate).
constexpr int kP2pTag = 7;

struct P2pOp {
  const char* call;  // "ncclSend" or "ncclRecv"
  ncclComm_t comm;
  bool send;
  int peer;
  void* buf;
  size_t count;
  Type type;
  cudaStream_t stream;
  size_t bytes() const { return count * type.size; }
};

thread_local int tl_group_depth = 0;
thread_local std::vector<P2pOp> tl_queued;
thread_local ncclResult_t tl_group_error = ncclSuccess;
thread_local std::string tl_group_why;

// "ncclRecv from rank 1 (12 bytes)": an operation in messages.
std::string describe(const P2pOp& op) {
  return std::string(op.call) + (op.send ? " to rank " : " from rank ") + std::to_string(op.peer) + " (" +
         std::to_string(op.bytes()) + " bytes)";
}

// This rank's messages to itself: per communicator, the k-th send to itself is the k-th
// receive from itself. Checked for every communicator before any is copied.
ncclResult_t run_self(const char* who, const std::vector<P2pOp>& ops) {
  std::vector<std::pair<const P2pOp*, const P2pOp*>> pairs;
  std::vector<ncclComm_t> comms;
  for (const P2pOp& op : ops)
    if (op.peer == op.comm->rank && std::find(comms.begin(), comms.end(), op.comm) == comms.end())
      comms.push_back(op.comm);
  for (ncclComm_t comm : comms) {
    std::vector<const P2pOp*> sends, recvs;
    for (const P2pOp& op : ops)
      if (op.comm == comm && op.peer == comm->rank) (op.send ? sends : recvs).push_back(&op);
    if (sends.size() != recvs.size())
      return fail(ncclInvalidUsage, std::string(who) + ": rank " + std::to_string(comm->rank) + " sends " +
                                        std::to_string(sends.size()) + " message(s) to itself but receives " +
                                        std::to_string(recvs.size()) +
                                        " from itself; each needs its match in the same group (NCCL would wait "
                                        "for it forever)");
    for (size_t k = 0; k < sends.size(); ++k) {
      if (sends[k]->bytes() != recvs[k]->bytes())
        return fail(ncclInvalidUsage, std::string(who) + ": rank " + std::to_string(comm->rank) + " sends " +
                                          std::to_string(sends[k]->bytes()) + " bytes to itself to a receive of " +
                                          std::to_string(recvs[k]->bytes()) + " bytes (NCCL requires equal counts)");
      pairs.emplace_back(sends[k], recvs[k]);
    }
  }
  for (const auto& [send, recv] : pairs)
    if (send->bytes() > 0) std::memmove(recv->buf, send->buf, send->bytes());
  return ncclSuccess;
}

// A group's operations on other ranks, to completion (see the file comment).
ncclResult_t run_peers(const char* who, const std::vector<P2pOp>& ops) {
  std::vector<ncclComm_t> comms;               // every communicator involved, once
  std::vector<std::vector<TcpP2p>> tcp_ops;    // by comms' index, on the TCP transport
  std::vector<MPI_Request> requests;
  std::vector<const P2pOp*> posted;            // by requests' index
  std::string failure, mismatch;
  for (const P2pOp& op : ops) {
    if (op.peer == op.comm->rank) continue;
    auto it = std::find(comms.begin(), comms.end(), op.comm);
    if (it == comms.end()) {
      comms.push_back(op.comm);
      tcp_ops.emplace_back();
      it = comms.end() - 1;
    }
    if (op.comm->tcp != nullptr) {
      tcp_ops[size_t(it - comms.begin())].push_back(TcpP2p{op.send, op.peer, op.buf, op.bytes()});
      continue;
    }
    MPI_Request req = MPI_REQUEST_NULL;
    const int rc = op.send ? MPI_Issend(op.buf, int(op.count), op.type.mpi, op.peer, kP2pTag, op.comm->mpi, &req)
                           : MPI_Irecv(op.buf, int(op.count), op.type.mpi, op.peer, kP2pTag, op.comm->mpi, &req);
    if (rc != MPI_SUCCESS) {
      failure = describe(op) + ": " + (op.send ? "MPI_Issend" : "MPI_Irecv") + " failed: " + mpi_error(rc);
      break;
    }
    requests.push_back(req);
    posted.push_back(&op);
  }
  for (size_t k = 0; k < comms.size() && failure.empty(); ++k)
    if (!tcp_ops[k].empty()) comms[k]->tcp->p2p_start(tcp_ops[k]);

  for (ncclComm_t comm : comms) comm->busy = true;
  bool aborted = false;
  auto next_hook = std::chrono::steady_clock::now();
  while (failure.empty()) {
    bool running = false;
    for (size_t i = 0; i < requests.size() && failure.empty(); ++i) {
      if (requests[i] == MPI_REQUEST_NULL) continue;  // completed
      int flag = 0;
      MPI_Status st;
      const int rc = MPI_Test(&requests[i], &flag, &st);
      const P2pOp& op = *posted[i];
      int error_class = MPI_SUCCESS;
      if (rc != MPI_SUCCESS) MPI_Error_class(rc, &error_class);
      if (error_class == MPI_ERR_TRUNCATE) {
        requests[i] = MPI_REQUEST_NULL;
        if (mismatch.empty())
          mismatch = describe(op) + ": rank " + std::to_string(op.peer) + " sent more than the " +
                     std::to_string(op.bytes()) + " bytes of this receive";
      } else if (rc != MPI_SUCCESS) {
        failure = describe(op) + ": MPI_Test failed: " + mpi_error(rc);
      } else if (!flag) {
        running = true;
      } else if (!op.send) {
        int got = 0;
        MPI_Get_count(&st, op.type.mpi, &got);
        if (size_t(got) != op.count && mismatch.empty())
          mismatch = describe(op) + ": rank " + std::to_string(op.peer) + " sent " +
                     std::to_string(size_t(got) * op.type.size) + " bytes";
      }
    }
    for (size_t k = 0; k < comms.size() && failure.empty(); ++k) {
      if (tcp_ops[k].empty()) continue;
      std::string why, tcp_mismatch;
      // Only the TCP transport's sockets to wait for: let poll sleep up to a millisecond.
      switch (comms[k]->tcp->p2p_progress(requests.empty() ? 1 : 0, &why, &tcp_mismatch)) {
        case TcpClique::Progress::Failed: failure = "the TCP transport: " + why; break;
        case TcpClique::Progress::Running: running = true; break;
        case TcpClique::Progress::Done: break;
      }
      if (!tcp_mismatch.empty() && mismatch.empty()) mismatch = tcp_mismatch;
    }
    if (!running || !failure.empty()) break;
    if (void (*hook)(void) = wait_hook(); hook != nullptr && std::chrono::steady_clock::now() >= next_hook) {
      hook();
      next_hook = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
    }
    for (ncclComm_t comm : comms) aborted = aborted || comm->aborted;
    if (aborted) break;
  }
  for (ncclComm_t comm : comms) {
    comm->busy = false;
    aborted = aborted || comm->aborted;
  }

  // Whatever is still in flight is given up: its communicators cannot be trusted any more.
  const bool in_flight = !failure.empty() || aborted;
  if (in_flight) {
    for (size_t k = 0; k < comms.size(); ++k) {
      comms[k]->abandoned = comms[k]->abandoned || comms[k]->mpi != MPI_COMM_NULL;
      if (comms[k]->tcp != nullptr) comms[k]->tcp->p2p_clear();
    }
  }
  if (aborted) {
    for (ncclComm_t comm : comms) {
      if (comm->aborted)
        free_comm(comm, /*pending=*/true);  // ncclCommAbort left it to the call that waits on it
      else
        mark_failed(comm, ncclRemoteError);
    }
    return fail(ncclRemoteError, std::string(who) + ": the communicator was aborted (ncclCommAbort) while the "
                                                    "point-to-point operations waited for their peers");
  }
  if (!failure.empty()) {
    for (ncclComm_t comm : comms) mark_failed(comm, ncclSystemError);
    return fail(ncclSystemError, std::string(who) + ": " + failure);
  }
  if (!mismatch.empty())
    return fail(ncclInvalidUsage, std::string(who) + ": a receive and its matching send differ in length (NCCL "
                                                     "requires equal counts): " + mismatch);
  return ncclSuccess;
}

// Runs a group's operations; `who` names the call for messages ("ncclGroupEnd", or the
// call itself outside a group).
ncclResult_t run_group(const char* who, const std::vector<P2pOp>& ops) {
  for (const P2pOp& op : ops)  // a communicator destroyed between the call and ncclGroupEnd
    if (const ncclResult_t r = check_comm(who, op.comm); r != ncclSuccess) return r;
  for (const P2pOp& op : ops) drain(op.stream);
  if (const ncclResult_t r = run_self(who, ops); r != ncclSuccess) return r;
  return run_peers(who, ops);
}

ncclResult_t p2p(const char* call, bool send, void* buf, size_t count, ncclDataType_t datatype, int peer,
                 ncclComm_t comm, cudaStream_t stream) {
  Call c;
  if (const ncclResult_t r = prologue(&c, call, comm, count, datatype, nullptr, stream); r != ncclSuccess) return r;
  if (peer < 0 || peer >= comm->nranks)
    return fail(ncclInvalidArgument, std::string(call) + ": peer " + std::to_string(peer) +
                                         " is not in [0, nranks) = [0, " + std::to_string(comm->nranks) + ")");
  if (count > 0)
    if (const ncclResult_t r = check_buffer(c, send ? "sendbuff" : "recvbuff", buf, count * c.type.size);
        r != ncclSuccess)
      return r;
  const P2pOp op{call, comm, send, peer, buf, count, c.type, stream};
  if (tl_group_depth > 0) {
    tl_queued.push_back(op);
    return ncclSuccess;
  }
  return run_group(call, {op});
}

}  // namespace

void note_group_failure(ncclResult_t r) {
  if (tl_group_depth == 0 || tl_group_error != ncclSuccess || r == ncclSuccess) return;
  tl_group_error = r;
  tl_group_why = ncclGetLastError(nullptr);
  if (const std::string prefix = "NCCL emulator: "; tl_group_why.rfind(prefix, 0) == 0)
    tl_group_why.erase(0, prefix.size());
}

}  // namespace fsdp_emu

using namespace fsdp_emu;

extern "C" {

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return p2p("ncclSend", true, const_cast<void*>(sendbuff), count, datatype, peer, comm, stream);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return p2p("ncclRecv", false, recvbuff, count, datatype, peer, comm, stream);
}

ncclResult_t ncclGroupStart(void) {
  ++tl_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (tl_group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without a matching ncclGroupStart");
  if (--tl_group_depth > 0) return ncclSuccess;  // nested: the outermost end runs the group
  std::vector<P2pOp> ops;
  ops.swap(tl_queued);
  if (const ncclResult_t failed = tl_group_error; failed != ncclSuccess) {
    tl_group_error = ncclSuccess;
    return fail(failed, "ncclGroupEnd: a call in the group failed (" + tl_group_why +
                            "), so none of the group's operations ran");
  }
  if (ops.empty()) return ncclSuccess;
  return run_group("ncclGroupEnd", ops);
}

}  // extern "C"
