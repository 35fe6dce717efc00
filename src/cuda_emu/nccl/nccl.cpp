// The NCCL stand-in of the emulation build (semantics: src/cuda_emu/include/nccl.h): NCCL's
// collectives executed as blocking MPI collectives between the processes of an mpirun job,
// on the emulator's device memory, which is host memory MPI can read and write directly.
//
// A collective is a non-blocking MPI collective, waited for inside the call (streams are
// eager here). While it waits the call polls, and every millisecond calls the hook of
// fsdpEmuNcclSetWaitHook: where a GPU's host would have returned at once and waited later
// (at a read-back), the emulator's host waits here, so that is where the host's wait hook
// (fsdp/core/host_wait.h: the collective watchdog) must run. ncclCommAbort from that hook,
// or from another thread, ends the wait with ncclRemoteError and frees the communicator
// when the call returns.
//
// A communicator is an MPI communicator over the member processes in NCCL rank order.
// ncclCommInitRank builds it without involving any other process, as NCCL does: the id
// names the world rank that made it; every other member sends it (nranks, rank, world
// rank), it checks that they agree and answers with the member table, and the members
// create their communicator with MPI_Comm_create_group (collective over the members only).
//
// Processes that never initialised MPI (a job launched through fsdp_train's TCP store) use the
// second transport, TCP sockets through the process that made the id (nccl_tcp.h), as real NCCL
// makes its own connections whatever bootstrapped the processes; FSDP_EMU_NCCL_TRANSPORT=tcp
// picks it under MPI too. The id records which transport it was made for.
//
// Every argument is checked the way a GPU would fail (a host pointer, a buffer shorter than
// the count, a stream of another device) or NCCL would refuse (bad rank, type, op, root),
// and the reason goes to ncclGetLastError. Lives in its own library (fsdp_cuda_emu_nccl)
// because it needs MPI, which the single-process emulator does not. The point-to-point
// calls and the groups they run in are nccl_p2p.cpp's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "../internal.h"
#include "nccl_internal.h"
#include "nccl_tcp.h"

namespace fsdp_emu {
namespace {

constexpr char kMagic[12] = "fsdpEmuNccl";
struct IdFields {
  char magic[12];
  int32_t root_world_rank;  // -1: made before MPI was up (only a one-rank clique can use it)
  int32_t root_pid;
  uint64_t seq;
  int32_t tcp;              // 1: the TCP transport (nccl_tcp.h), listening on tcp_id
  TcpId tcp_id;
};
static_assert(sizeof(IdFields) <= NCCL_UNIQUE_ID_BYTES);

// Tags on MPI_COMM_WORLD: the join messages of an init, and MPI_Comm_create_group's own.
constexpr int kJoinTagBase = 20000, kCreateTagBase = 10000, kTagRange = 10000;

std::mutex g_mu;
std::set<const ncclComm*> g_live;
std::atomic<uint64_t> g_seq{0};
std::string g_inject_call;
ncclResult_t g_inject_result = ncclSuccess;
thread_local std::string tl_last_error;
std::atomic<void (*)(void)> g_wait_hook{nullptr};

MPI_Datatype g_f16 = MPI_DATATYPE_NULL, g_bf16 = MPI_DATATYPE_NULL;
MPI_Op g_half_ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};

}  // namespace

ncclResult_t fail(ncclResult_t r, const std::string& why) {
  tl_last_error = "NCCL emulator: " + why;
  note_group_failure(r);
  return r;
}

std::string str(const void* p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}

std::string mpi_error(int rc) {
  char err[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, err, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return err;
}

void (*wait_hook())(void) { return g_wait_hook.load(); }

namespace {

// True (with *r set) when the test asked this call to fail.
bool injected(const char* call, ncclResult_t* r) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_inject_call.empty() || g_inject_call != call) return false;
  g_inject_call.clear();
  *r = fail(g_inject_result, std::string(call) + ": error injected by fsdpEmuNcclInjectError");
  return true;
}

bool mpi_up() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

// ---- data types and reductions ----

float half_to_float(uint16_t bits, bool bf16) {
  return bf16 ? __bfloat162float(__ushort_as_bfloat16(bits)) : __half2float(__ushort_as_half(bits));
}
uint16_t float_to_half(float f, bool bf16) {
  return bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(f)) : __half_as_ushort(__float2half_rn(f));
}

// float16 / bfloat16: combined in float32, rounded once per combination (NCCL's kernels).
template <int Op>
void half_reduce(void* in, void* inout, int* len, MPI_Datatype* type) {
  const bool bf16 = *type == g_bf16;
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = half_to_float(a[i], bf16), y = half_to_float(b[i], bf16);
    const float r = Op == ncclSum ? x + y : Op == ncclProd ? x * y : Op == ncclMax ? (x > y ? x : y) : (x < y ? x : y);
    b[i] = float_to_half(r, bf16);
  }
}

// Called with g_mu held, MPI up.
int make_half_types() {
  if (g_f16 != MPI_DATATYPE_NULL) return MPI_SUCCESS;
  int rc = MPI_SUCCESS;
  for (MPI_Datatype* t : {&g_f16, &g_bf16}) {
    if (rc == MPI_SUCCESS) rc = MPI_Type_contiguous(2, MPI_BYTE, t);
    if (rc == MPI_SUCCESS) rc = MPI_Type_commit(t);
  }
  MPI_User_function* fns[4] = {&half_reduce<ncclSum>, &half_reduce<ncclProd>, &half_reduce<ncclMax>,
                               &half_reduce<ncclMin>};
  for (int k = 0; k < 4 && rc == MPI_SUCCESS; ++k) rc = MPI_Op_create(fns[k], /*commute=*/1, &g_half_ops[k]);
  return rc;
}

bool type_of(ncclDataType_t t, Type* out) {
  switch (t) {
    case ncclInt8: *out = {"ncclInt8", 1, MPI_INT8_T, false}; return true;
    case ncclUint8: *out = {"ncclUint8", 1, MPI_UINT8_T, false}; return true;
    case ncclInt32: *out = {"ncclInt32", 4, MPI_INT32_T, false}; return true;
    case ncclUint32: *out = {"ncclUint32", 4, MPI_UINT32_T, false}; return true;
    case ncclInt64: *out = {"ncclInt64", 8, MPI_INT64_T, false}; return true;
    case ncclUint64: *out = {"ncclUint64", 8, MPI_UINT64_T, false}; return true;
    case ncclFloat16: *out = {"ncclFloat16", 2, g_f16, true}; return true;
    case ncclFloat32: *out = {"ncclFloat32", 4, MPI_FLOAT, false}; return true;
    case ncclFloat64: *out = {"ncclFloat64", 8, MPI_DOUBLE, false}; return true;
    case ncclBfloat16: *out = {"ncclBfloat16", 2, g_bf16, true}; return true;
    default: return false;
  }
}

MPI_Op mpi_op(ncclRedOp_t op, const Type& t) {
  if (t.half) return g_half_ops[int(op)];
  switch (op) {
    case ncclSum: return MPI_SUM;
    case ncclProd: return MPI_PROD;
    case ncclMax: return MPI_MAX;
    default: return MPI_MIN;
  }
}

}  // namespace

// ---- argument checks shared by the collectives and the point-to-point calls ----

ncclResult_t check_comm(const char* call, ncclComm_t comm) {
  if (comm == nullptr) return fail(ncclInvalidArgument, std::string(call) + ": comm is NULL");
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_live.count(comm) == 0)
    return fail(ncclInvalidArgument, std::string(call) + ": comm " + str(comm) +
                                         " is not a live communicator (destroyed, aborted, or never initialised)");
  if (comm->async != ncclSuccess)
    return fail(comm->async, std::string(call) + ": the communicator failed earlier (" +
                                 ncclGetErrorString(comm->async) + "); destroy or abort it");
  return ncclSuccess;
}

ncclResult_t prologue(Call* c, const char* call, ncclComm_t comm, size_t count, ncclDataType_t type,
                      const ncclRedOp_t* op, cudaStream_t stream) {
  c->name = call;
  c->comm = comm;
  c->count = count;
  ncclResult_t r = ncclSuccess;
  if (injected(call, &r)) return r;
  if ((r = check_comm(call, comm)) != ncclSuccess) return r;
  if (!type_of(type, &c->type))
    return fail(ncclInvalidArgument, std::string(call) + ": datatype " + std::to_string(int(type)) +
                                         (type == ncclFloat8e4m3 || type == ncclFloat8e5m2
                                              ? " (fp8) is not emulated"
                                              : " is not an ncclDataType_t"));
  if (op != nullptr && (int(*op) < 0 || int(*op) > int(ncclMin)))
    return fail(ncclInvalidArgument, std::string(call) + ": reduction op " + std::to_string(int(*op)) +
                                         (*op == ncclAvg ? " (ncclAvg) is not emulated" : " is not emulated"));
  if (count > size_t(INT_MAX))
    return fail(ncclInvalidArgument, std::string(call) + ": count " + std::to_string(count) +
                                         " exceeds INT_MAX, which the MPI transport of the emulator cannot move");
  std::string why;
  const int d = stream_device(stream, &why);
  if (d < 0) return fail(ncclInvalidArgument, std::string(call) + ": stream is " + why);
  drain(stream);  // the stream's queued copies come first (Note [Deferred copies])
  if (d != comm->device)
    return fail(ncclInvalidArgument, std::string(call) + ": stream " + str(stream) + " belongs to cuda:" +
                                         std::to_string(d) + " but the communicator to cuda:" +
                                         std::to_string(comm->device));
  return ncclSuccess;
}

// What a GPU could reach; callers skip it for count 0.
ncclResult_t check_buffer(const Call& c, const char* what, const void* p, size_t bytes) {
  if (p == nullptr)
    return fail(ncclInvalidArgument, std::string(c.name) + ": " + what + " is NULL (count " + std::to_string(c.count) + ")");
  if (!device_accessible(p, bytes, c.comm->device))
    return fail(ncclInvalidArgument, std::string(c.name) + ": " + what + " needs " + std::to_string(bytes) +
                                         " bytes of device memory on cuda:" + std::to_string(c.comm->device) +
                                         " but is " + describe_pointer(p));
  return ncclSuccess;
}

void mark_failed(ncclComm_t comm, ncclResult_t r) {
  std::lock_guard<std::mutex> lock(g_mu);
  comm->async = r;
}

// OpenMPI 4.1 crashes progressing a non-blocking operation whose communicator was freed,
// so an abandoned one's MPI communicator stays. After MPI_Finalize MPI has freed it itself.
void free_comm(ncclComm_t comm, bool pending) {
  if (!pending && !comm->abandoned && comm->mpi != MPI_COMM_NULL && mpi_up()) MPI_Comm_free(&comm->mpi);
  delete comm->tcp;
  delete comm;
}

namespace {

bool overlap(const void* a, size_t na, const void* b, size_t nb) {
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return na > 0 && nb > 0 && pa < pb + nb && pb < pa + na;
}

ncclResult_t mpi_result(const Call& c, int rc, const char* mpi_call) {
  if (rc == MPI_SUCCESS) return ncclSuccess;
  mark_failed(c.comm, ncclSystemError);
  return fail(ncclSystemError, std::string(c.name) + ": " + mpi_call + " failed: " + mpi_error(rc));
}

// Elementwise inout = inout (op) in over count elements of an NCCL datatype: the TCP
// transport's reduction (MPI's ops do it on the other transport).
template <typename T>
void combine_as(const void* in, void* inout, size_t count, int op) {
  const auto* a = static_cast<const T*>(in);
  auto* b = static_cast<T*>(inout);
  for (size_t i = 0; i < count; ++i) {
    const T x = a[i], y = b[i];
    b[i] = op == ncclSum ? T(y + x) : op == ncclProd ? T(y * x) : op == ncclMax ? (x > y ? x : y) : (x < y ? x : y);
  }
}

void combine(const void* in, void* inout, size_t count, int type, int op) {
  switch (ncclDataType_t(type)) {
    case ncclInt8: return combine_as<int8_t>(in, inout, count, op);
    case ncclUint8: return combine_as<uint8_t>(in, inout, count, op);
    case ncclInt32: return combine_as<int32_t>(in, inout, count, op);
    case ncclUint32: return combine_as<uint32_t>(in, inout, count, op);
    case ncclInt64: return combine_as<int64_t>(in, inout, count, op);
    case ncclUint64: return combine_as<uint64_t>(in, inout, count, op);
    case ncclFloat32: return combine_as<float>(in, inout, count, op);
    case ncclFloat64: return combine_as<double>(in, inout, count, op);
    case ncclFloat16:
    case ncclBfloat16: {
      const bool bf16 = type == ncclBfloat16;
      const auto* a = static_cast<const uint16_t*>(in);
      auto* b = static_cast<uint16_t*>(inout);
      for (size_t i = 0; i < count; ++i) {
        const float x = half_to_float(a[i], bf16), y = half_to_float(b[i], bf16);
        const float r = op == ncclSum ? y + x : op == ncclProd ? y * x : op == ncclMax ? (x > y ? x : y) : (x < y ? x : y);
        b[i] = float_to_half(r, bf16);
      }
      return;
    }
    default: return;
  }
}

bool tcp_forced() {
  const char* v = std::getenv("FSDP_EMU_NCCL_TRANSPORT");
  return v != nullptr && std::string(v) == "tcp";
}

// One collective on the TCP transport, waited for like wait_for waits for MPI's.
ncclResult_t tcp_collective(const Call& c, TcpOp op, int red_op, int root, const void* send, size_t send_bytes,
                            void* recv, size_t recv_bytes, ncclDataType_t type) {
  ncclComm_t comm = c.comm;
  comm->busy = true;
  std::string why;
  const bool ok = comm->tcp->run(op, int(type), red_op, root, send, send_bytes, recv, recv_bytes, c.type.size,
                                 &combine, g_wait_hook.load(), comm->aborted, &why);
  comm->busy = false;
  if (comm->aborted) {
    free_comm(comm, false);
    return fail(ncclRemoteError, std::string(c.name) + ": the communicator was aborted (ncclCommAbort) while the "
                                                       "collective waited for the other ranks");
  }
  if (ok) return ncclSuccess;
  mark_failed(comm, ncclSystemError);
  return fail(ncclSystemError, std::string(c.name) + ": the TCP transport: " + why);
}

// The collective just issued (rc, *req) to completion: polled, with the wait hook called
// every millisecond, and abandoned if the communicator is aborted meanwhile.
ncclResult_t wait_for(const Call& c, int rc, MPI_Request* req, const char* mpi_call) {
  if (rc != MPI_SUCCESS) return mpi_result(c, rc, mpi_call);
  ncclComm_t comm = c.comm;
  comm->busy = true;
  auto next_hook = std::chrono::steady_clock::now();
  while (true) {
    int flag = 0;
    rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || flag) break;
    if (void (*hook)(void) = g_wait_hook.load(); hook != nullptr && std::chrono::steady_clock::now() >= next_hook) {
      hook();
      next_hook = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
    }
    if (comm->aborted) {
      free_comm(comm, /*pending=*/true);
      return fail(ncclRemoteError, std::string(c.name) + ": the communicator was aborted (ncclCommAbort) while the "
                                                         "collective waited for the other ranks");
    }
  }
  comm->busy = false;
  if (comm->aborted) {  // aborted by a hook that ran as the collective completed
    free_comm(comm, false);
    return fail(ncclRemoteError, std::string(c.name) + ": the communicator was aborted (ncclCommAbort)");
  }
  return mpi_result(c, rc, mpi_call);
}

}  // namespace
}  // namespace fsdp_emu

using namespace fsdp_emu;

extern "C" {

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t) { return tl_last_error.c_str(); }

fsdpEmuNcclWaitHook fsdpEmuNcclSetWaitHook(fsdpEmuNcclWaitHook hook) { return g_wait_hook.exchange(hook); }

void fsdpEmuNcclInjectError(const char* call, ncclResult_t result) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_inject_call = call != nullptr ? call : "";
  g_inject_result = result;
}

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  ncclResult_t r = ncclSuccess;
  if (injected("ncclGetUniqueId", &r)) return r;
  if (id == nullptr) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  IdFields f{};
  std::memcpy(f.magic, kMagic, sizeof kMagic);
  f.root_world_rank = -1;
  if (mpi_up()) MPI_Comm_rank(MPI_COMM_WORLD, &f.root_world_rank);
  f.root_pid = int32_t(getpid());
  f.seq = ++g_seq;
  if (!mpi_up() || tcp_forced()) {
    std::string why;
    if (!tcp_listen(f.seq, &f.tcp_id, &why)) return fail(ncclSystemError, "ncclGetUniqueId: " + why);
    f.tcp = 1;
  }
  std::memset(id, 0, sizeof *id);
  std::memcpy(id->internal, &f, sizeof f);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  ncclResult_t r = ncclSuccess;
  if (injected("ncclCommInitRank", &r)) return r;
  if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
  *comm = nullptr;
  if (nranks < 1) return fail(ncclInvalidArgument, "ncclCommInitRank: nranks " + std::to_string(nranks) + " < 1");
  if (rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " is not in [0, nranks) = [0, " +
                                         std::to_string(nranks) + ")");
  IdFields f;
  std::memcpy(&f, id.internal, sizeof f);
  if (std::memcmp(f.magic, kMagic, sizeof kMagic) != 0)
    return fail(ncclInvalidArgument, "ncclCommInitRank: commId was not made by ncclGetUniqueId");
  int device = 0;
  cudaGetDevice(&device);
  if (cudaSetDevice(device) != cudaSuccess)  // NCCL uses the current device; it must be usable
    return fail(ncclUnhandledCudaError, "ncclCommInitRank: no usable current device (cuda:" + std::to_string(device) + ")");

  MPI_Comm mpi = MPI_COMM_NULL;
  TcpClique* tcp = nullptr;
  if (nranks > 1 && f.tcp == 1) {
    std::string why;
    tcp = TcpClique::join(nranks, rank, f.root_pid, f.seq, f.tcp_id, &why);
    if (tcp == nullptr) return fail(ncclSystemError, "ncclCommInitRank: the TCP transport: " + why);
  } else if (nranks > 1) {
    if (!mpi_up())
      return fail(ncclSystemError, "ncclCommInitRank: the emulated NCCL moves data over MPI, which is not initialised "
                                   "(start the ranks with mpirun and initialise MPI first)");
    if (f.root_world_rank < 0)
      return fail(ncclInvalidUsage, "ncclCommInitRank: commId was made before MPI was initialised");
    {
      std::lock_guard<std::mutex> lock(g_mu);
      if (const int rc = make_half_types(); rc != MPI_SUCCESS)
        return fail(ncclSystemError, "ncclCommInitRank: MPI datatypes: " + mpi_error(rc));
    }
    int world = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world);
    const int join_tag = kJoinTagBase + int(f.seq % kTagRange), create_tag = kCreateTagBase + int(f.seq % kTagRange);
    // reply[0]: 0 when the members agree; reply[1 + r]: NCCL rank r's world rank.
    std::vector<int64_t> reply(size_t(nranks) + 1, -1);
    std::string problem;
    int rc = MPI_SUCCESS;
    if (world == f.root_world_rank) {
      reply[0] = 0;
      reply[size_t(rank) + 1] = world;
      std::vector<int> sources;
      for (int k = 1; k < nranks && rc == MPI_SUCCESS; ++k) {
        int64_t join[4];  // nranks, rank, world rank, id sequence
        MPI_Status st;
        rc = MPI_Recv(join, 4, MPI_INT64_T, MPI_ANY_SOURCE, join_tag, MPI_COMM_WORLD, &st);
        if (rc != MPI_SUCCESS) break;
        sources.push_back(st.MPI_SOURCE);
        if (join[3] != int64_t(f.seq) || join[0] != nranks || join[1] < 0 || join[1] >= nranks ||
            reply[size_t(join[1]) + 1] != -1) {
          reply[0] = 1;
          problem = "world rank " + std::to_string(join[2]) + " joined as rank " + std::to_string(join[1]) + " of " +
                    std::to_string(join[0]) + ", but this clique has " + std::to_string(nranks) +
                    " ranks and that rank is " + (join[1] >= 0 && join[1] < nranks ? "taken" : "out of range");
        } else {
          reply[size_t(join[1]) + 1] = join[2];
        }
      }
      for (size_t k = 0; k < sources.size() && rc == MPI_SUCCESS; ++k)
        rc = MPI_Send(reply.data(), nranks + 1, MPI_INT64_T, sources[k], join_tag, MPI_COMM_WORLD);
    } else {
      const int64_t join[4] = {nranks, rank, world, int64_t(f.seq)};
      rc = MPI_Send(join, 4, MPI_INT64_T, f.root_world_rank, join_tag, MPI_COMM_WORLD);
      if (rc == MPI_SUCCESS)
        rc = MPI_Recv(reply.data(), nranks + 1, MPI_INT64_T, f.root_world_rank, join_tag, MPI_COMM_WORLD,
                      MPI_STATUS_IGNORE);
      if (rc == MPI_SUCCESS && reply[0] != 0)
        problem = "the ranks joining this commId (made by world rank " + std::to_string(f.root_world_rank) +
                  ") disagree on nranks or share a rank";
    }
    if (rc != MPI_SUCCESS) return fail(ncclSystemError, "ncclCommInitRank: bootstrap over MPI: " + mpi_error(rc));
    if (reply[0] != 0) return fail(ncclInvalidUsage, "ncclCommInitRank: " + problem);
    std::vector<int> members(static_cast<size_t>(nranks));
    for (int k = 0; k < nranks; ++k) members[size_t(k)] = int(reply[size_t(k) + 1]);
    MPI_Group world_group = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
    rc = MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    if (rc == MPI_SUCCESS) rc = MPI_Group_incl(world_group, nranks, members.data(), &group);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, create_tag, &mpi);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(mpi, MPI_ERRORS_RETURN);
    if (group != MPI_GROUP_NULL) MPI_Group_free(&group);
    if (world_group != MPI_GROUP_NULL) MPI_Group_free(&world_group);
    if (rc != MPI_SUCCESS) return fail(ncclSystemError, "ncclCommInitRank: MPI_Comm_create_group: " + mpi_error(rc));
  }
  auto* c = new ncclComm{nranks, rank, device, mpi, ncclSuccess, {}, {}, tcp};
  std::lock_guard<std::mutex> lock(g_mu);
  g_live.insert(c);
  *comm = c;
  return ncclSuccess;
}

static ncclResult_t release_comm(const char* call, ncclComm_t comm) {
  ncclResult_t r = ncclSuccess;
  if (injected(call, &r)) return r;
  if (comm == nullptr) return fail(ncclInvalidArgument, std::string(call) + ": comm is NULL");
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_live.erase(comm) == 0)
      return fail(ncclInvalidArgument, std::string(call) + ": comm " + str(comm) + " is not a live communicator");
  }
  // A collective waiting on it (from the wait hook, or another thread) ends its wait and
  // frees it; ncclCommDestroy of a busy communicator is the caller's error, as in NCCL.
  if (comm->busy) {
    comm->aborted = true;
    return ncclSuccess;
  }
  free_comm(comm, false);
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) { return release_comm("ncclCommDestroy", comm); }
ncclResult_t ncclCommAbort(ncclComm_t comm) { return release_comm("ncclCommAbort", comm); }

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async) {
  if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: comm is NULL");
  if (async == nullptr) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_live.count(comm) == 0)
    return fail(ncclInvalidArgument, "ncclCommGetAsyncError: comm " + str(comm) + " is not a live communicator");
  if (g_inject_call == "ncclCommGetAsyncError") {
    g_inject_call.clear();
    comm->async = g_inject_result;
    tl_last_error = "NCCL emulator: asynchronous error injected by fsdpEmuNcclInjectError";
  }
  *async = comm->async;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (const ncclResult_t r = check_comm("ncclCommCount", comm); r != ncclSuccess) return r;
  if (count == nullptr) return fail(ncclInvalidArgument, "ncclCommCount: count is NULL");
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (const ncclResult_t r = check_comm("ncclCommCuDevice", comm); r != ncclSuccess) return r;
  if (device == nullptr) return fail(ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
  *device = comm->device;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (const ncclResult_t r = check_comm("ncclCommUserRank", comm); r != ncclSuccess) return r;
  if (rank == nullptr) return fail(ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  Call c;
  if (const ncclResult_t r = prologue(&c, "ncclAllGather", comm, sendcount, datatype, nullptr, stream); r != ncclSuccess)
    return r;
  if (sendcount == 0) return ncclSuccess;
  const size_t bytes = sendcount * c.type.size, n = size_t(comm->nranks);
  if (ncclResult_t r = check_buffer(c, "sendbuff", sendbuff, bytes); r != ncclSuccess) return r;
  if (ncclResult_t r = check_buffer(c, "recvbuff", recvbuff, bytes * n); r != ncclSuccess) return r;
  const bool in_place = sendbuff == static_cast<char*>(recvbuff) + size_t(comm->rank) * bytes;
  if (!in_place && overlap(sendbuff, bytes, recvbuff, bytes * n))
    return fail(ncclInvalidArgument, "ncclAllGather: sendbuff overlaps recvbuff but is not recvbuff + rank * sendcount, "
                                     "the one overlap NCCL defines (in place)");
  char* mine = static_cast<char*>(recvbuff) + size_t(comm->rank) * bytes;
  if (n == 1) {
    if (!in_place) std::memcpy(mine, sendbuff, bytes);
    return ncclSuccess;
  }
  if (comm->tcp != nullptr)
    return tcp_collective(c, TcpOp::AllGather, 0, 0, in_place ? static_cast<const void*>(mine) : sendbuff, bytes,
                          recvbuff, bytes * n, datatype);
  const int count = int(sendcount);
  MPI_Request req = MPI_REQUEST_NULL;
  return wait_for(c, MPI_Iallgather(in_place ? MPI_IN_PLACE : sendbuff, count, c.type.mpi, recvbuff, count,
                                    c.type.mpi, comm->mpi, &req),
                  &req, "MPI_Iallgather");
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  Call c;
  if (const ncclResult_t r = prologue(&c, "ncclReduceScatter", comm, recvcount, datatype, &op, stream); r != ncclSuccess)
    return r;
  if (recvcount == 0) return ncclSuccess;
  const size_t bytes = recvcount * c.type.size, n = size_t(comm->nranks);
  if (ncclResult_t r = check_buffer(c, "sendbuff", sendbuff, bytes * n); r != ncclSuccess) return r;
  if (ncclResult_t r = check_buffer(c, "recvbuff", recvbuff, bytes); r != ncclSuccess) return r;
  const bool in_place = recvbuff == static_cast<const char*>(sendbuff) + size_t(comm->rank) * bytes;
  if (!in_place && overlap(sendbuff, bytes * n, recvbuff, bytes))
    return fail(ncclInvalidArgument, "ncclReduceScatter: recvbuff overlaps sendbuff but is not sendbuff + rank * "
                                     "recvcount, the one overlap NCCL defines (in place)");
  if (n == 1) {
    if (!in_place) std::memcpy(recvbuff, sendbuff, bytes);
    return ncclSuccess;
  }
  if (comm->tcp != nullptr)
    return tcp_collective(c, TcpOp::ReduceScatter, int(op), 0, sendbuff, bytes * n, recvbuff, bytes, datatype);
  // MPI forbids aliasing its send and receive buffers (and its in-place layout differs).
  std::vector<char> copy;
  const void* src = sendbuff;
  if (in_place) {
    copy.assign(static_cast<const char*>(sendbuff), static_cast<const char*>(sendbuff) + bytes * n);
    src = copy.data();
  }
  MPI_Request req = MPI_REQUEST_NULL;
  return wait_for(c, MPI_Ireduce_scatter_block(src, recvbuff, int(recvcount), c.type.mpi, mpi_op(op, c.type),
                                               comm->mpi, &req),
                  &req, "MPI_Ireduce_scatter_block");
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  Call c;
  if (const ncclResult_t r = prologue(&c, "ncclAllReduce", comm, count, datatype, &op, stream); r != ncclSuccess)
    return r;
  if (count == 0) return ncclSuccess;
  const size_t bytes = count * c.type.size;
  if (ncclResult_t r = check_buffer(c, "sendbuff", sendbuff, bytes); r != ncclSuccess) return r;
  if (ncclResult_t r = check_buffer(c, "recvbuff", recvbuff, bytes); r != ncclSuccess) return r;
  const bool in_place = sendbuff == recvbuff;
  if (!in_place && overlap(sendbuff, bytes, recvbuff, bytes))
    return fail(ncclInvalidArgument, "ncclAllReduce: sendbuff and recvbuff overlap without being equal (in place)");
  if (comm->nranks == 1) {
    if (!in_place) std::memcpy(recvbuff, sendbuff, bytes);
    return ncclSuccess;
  }
  if (comm->tcp != nullptr)
    return tcp_collective(c, TcpOp::AllReduce, int(op), 0, sendbuff, bytes, recvbuff, bytes, datatype);
  MPI_Request req = MPI_REQUEST_NULL;
  return wait_for(c, MPI_Iallreduce(in_place ? MPI_IN_PLACE : sendbuff, recvbuff, int(count), c.type.mpi,
                                    mpi_op(op, c.type), comm->mpi, &req),
                  &req, "MPI_Iallreduce");
}

static ncclResult_t broadcast(const char* call, const void* sendbuff, void* recvbuff, size_t count,
                              ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  Call c;
  if (const ncclResult_t r = prologue(&c, call, comm, count, datatype, nullptr, stream); r != ncclSuccess) return r;
  if (root < 0 || root >= comm->nranks)
    return fail(ncclInvalidArgument, std::string(call) + ": root " + std::to_string(root) + " is not in [0, nranks) = [0, " +
                                         std::to_string(comm->nranks) + ")");
  if (count == 0) return ncclSuccess;
  const size_t bytes = count * c.type.size;
  if (ncclResult_t r = check_buffer(c, "recvbuff", recvbuff, bytes); r != ncclSuccess) return r;
  if (comm->rank == root && sendbuff != recvbuff) {
    if (ncclResult_t r = check_buffer(c, "sendbuff", sendbuff, bytes); r != ncclSuccess) return r;
    if (overlap(sendbuff, bytes, recvbuff, bytes))
      return fail(ncclInvalidArgument, std::string(call) + ": sendbuff and recvbuff overlap without being equal");
    std::memcpy(recvbuff, sendbuff, bytes);
  }
  if (comm->nranks == 1) return ncclSuccess;
  if (comm->tcp != nullptr)
    return tcp_collective(c, TcpOp::Broadcast, 0, root, recvbuff, bytes, recvbuff, bytes, datatype);
  MPI_Request req = MPI_REQUEST_NULL;
  return wait_for(c, MPI_Ibcast(recvbuff, int(count), c.type.mpi, root, comm->mpi, &req), &req, "MPI_Ibcast");
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return broadcast("ncclBroadcast", sendbuff, recvbuff, count, datatype, root, comm, stream);
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  return broadcast("ncclBcast", buff, buff, count, datatype, root, comm, stream);
}

}  // extern "C"
