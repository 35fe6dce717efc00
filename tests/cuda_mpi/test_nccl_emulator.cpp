// The emulation build's NCCL stand-in (src/cuda_emu/include/nccl.h) through NCCL's own API,
// under mpiexec: cliques over some of the ranks and in another rank order, the documented
// semantics the communicator does not use (in-place reduce-scatter, non-in-place
// broadcast and all-reduce, the other reductions and types), the misuse it refuses
// the way a GPU or NCCL would, and ncclCommAbort ending a collective that waits. Every refusal is decided locally, before communication, so
// all ranks fail alike and none waits for another. Then point-to-point (ncclSend / ncclRecv)
// on both transports (MPI, and the TCP sockets of a launch without MPI): a group sending and
// receiving both ways at once, several messages per pair matched in issue order, zero-byte
// messages, a rank's messages to itself; a failing call dropping its group, receives whose
// send has another length, and ncclCommAbort ending a group that waits.
#include <gtest/gtest.h>

#if defined(FSDP_CUDA_EMULATION)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cuda_mpi_test_env.h"
#include "fsdp/core/cuda.h"

namespace fsdp::test {
namespace {

int world_rank() { return world_groups().world->rank(); }
int world_size() { return world_groups().world->size(); }

// Every rank's id, so a clique can take its creator's.
std::vector<ncclUniqueId> all_ids(const ncclUniqueId& mine) {
  std::vector<ncclUniqueId> ids(static_cast<size_t>(world_size()));
  EXPECT_EQ(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, ids.data(), sizeof mine, MPI_BYTE, MPI_COMM_WORLD), MPI_SUCCESS);
  return ids;
}

// Device memory with host staging, on this rank's device.
template <typename T>
struct Buf {
  T* d = nullptr;
  size_t n;
  explicit Buf(size_t count) : n(count) { EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), n * sizeof(T)), cudaSuccess); }
  ~Buf() { cudaFree(d); }
  void put(const std::vector<T>& v) { ASSERT_EQ(cudaMemcpy(d, v.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess); }
  std::vector<T> get() const {
    std::vector<T> v(n);
    EXPECT_EQ(cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
};

class NcclEmulator : public ::testing::Test {
 protected:
  void SetUp() override {
    guard_ = std::make_unique<cuda::DeviceGuard>(rank_device());
    ncclUniqueId id;
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    const std::vector<ncclUniqueId> ids = all_ids(id);
    ASSERT_EQ(ncclCommInitRank(&world_, world_size(), ids[0], world_rank()), ncclSuccess) << ncclGetLastError(nullptr);
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (world_ != nullptr) EXPECT_EQ(ncclCommDestroy(world_), ncclSuccess);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    guard_.reset();
  }
  // The result and ncclGetLastError's text, for one assertion.
  static std::string outcome(ncclResult_t r) { return std::to_string(int(r)) + ": " + ncclGetLastError(nullptr); }

  std::unique_ptr<cuda::DeviceGuard> guard_;
  ncclComm_t world_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

TEST(NcclEmulatorApi, ErrorStringsAreNccls) {
  EXPECT_STREQ(ncclGetErrorString(ncclSuccess), "no error");
  EXPECT_STREQ(ncclGetErrorString(ncclInvalidArgument), "invalid argument (run with NCCL_DEBUG=WARN for details)");
  EXPECT_STREQ(ncclGetErrorString(ncclRemoteError), "remote process exited or there was a network error");
  EXPECT_STREQ(ncclGetErrorString(ncclResult_t(42)), "unknown result code");
  int v = 0;
  EXPECT_EQ(ncclGetVersion(&v), ncclSuccess);
  EXPECT_EQ(v, NCCL_VERSION_CODE);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
}

TEST(NcclEmulatorApi, InitRefusesBadArgumentsLocally) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t c = nullptr;
  EXPECT_EQ(ncclCommInitRank(&c, 0, id, 0), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("nranks 0 < 1"), std::string::npos);
  EXPECT_EQ(ncclCommInitRank(&c, 2, id, 2), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("rank 2 is not in [0, nranks)"), std::string::npos);
  ncclUniqueId junk;
  std::memset(&junk, 7, sizeof junk);
  EXPECT_EQ(ncclCommInitRank(&c, 1, junk, 0), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("not made by ncclGetUniqueId"), std::string::npos);
  EXPECT_EQ(ncclCommInitRank(nullptr, 1, id, 0), ncclInvalidArgument);
  EXPECT_EQ(c, nullptr);
  // A one-rank clique needs nobody else.
  ASSERT_EQ(ncclCommInitRank(&c, 1, id, 0), ncclSuccess);
  int n = 0, r = -1;
  EXPECT_EQ(ncclCommCount(c, &n), ncclSuccess);
  EXPECT_EQ(ncclCommUserRank(c, &r), ncclSuccess);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(r, 0);
  EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(c), ncclInvalidArgument);  // not live any more (never dereferenced)
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("not a live communicator"), std::string::npos);
}

// Pairs of ranks (0,1), (2,3), ... form cliques at the same time, each from its own id, in
// reversed order: the higher world rank is NCCL rank 0 and made the id. all_gather's order
// must follow NCCL ranks.
TEST_F(NcclEmulator, CliquesOfSomeRanksInTheirOwnOrder) {
  const int w = world_rank(), size = world_size();
  const int base = w - w % 2, members = std::min(2, size - base);
  const int nccl_rank = members - 1 - (w - base);  // reversed
  const int creator = base + members - 1;          // NCCL rank 0
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  const std::vector<ncclUniqueId> ids = all_ids(id);
  ncclComm_t pair = nullptr;
  ASSERT_EQ(ncclCommInitRank(&pair, members, ids[size_t(creator)], nccl_rank), ncclSuccess) << ncclGetLastError(nullptr);
  int n = 0, r = -1, d = -1;
  EXPECT_EQ(ncclCommCount(pair, &n), ncclSuccess);
  EXPECT_EQ(ncclCommUserRank(pair, &r), ncclSuccess);
  EXPECT_EQ(ncclCommCuDevice(pair, &d), ncclSuccess);
  EXPECT_EQ(n, members);
  EXPECT_EQ(r, nccl_rank);
  EXPECT_EQ(d, rank_device());
  Buf<int32_t> send(3), recv(3 * size_t(members));
  send.put({w, w * 10, w * 100});
  ASSERT_EQ(ncclAllGather(send.d, recv.d, 3, ncclInt32, pair, stream_), ncclSuccess) << ncclGetLastError(nullptr);
  const std::vector<int32_t> got = recv.get();
  for (int k = 0; k < members; ++k) {
    const int from = base + members - 1 - k;  // the world rank that is NCCL rank k
    EXPECT_EQ(got[size_t(3 * k)], from);
    EXPECT_EQ(got[size_t(3 * k + 2)], from * 100);
  }
  EXPECT_EQ(ncclCommDestroy(pair), ncclSuccess);
}

TEST_F(NcclEmulator, InPlaceReduceScatterAndOtherReductions) {
  const int w = world_rank(), size = world_size();
  // In place: recvbuff == sendbuff + rank * recvcount.
  Buf<float> full(5 * size_t(size));
  std::vector<float> v(full.n);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(w + 1) * float(i);
  full.put(v);
  ASSERT_EQ(ncclReduceScatter(full.d, full.d + 5 * w, 5, ncclFloat32, ncclSum, world_, stream_), ncclSuccess)
      << ncclGetLastError(nullptr);
  const float ranks_sum = float(size * (size + 1) / 2);
  const std::vector<float> got = full.get();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(got[size_t(5 * w + i)], ranks_sum * float(5 * w + i));
  // max / min / prod on int32, out of place.
  Buf<int32_t> a(2), b(2);
  a.put({w, -w});
  ASSERT_EQ(ncclAllReduce(a.d, b.d, 2, ncclInt32, ncclMax, world_, stream_), ncclSuccess);
  EXPECT_EQ(b.get(), (std::vector<int32_t>{size - 1, 0}));
  ASSERT_EQ(ncclAllReduce(a.d, b.d, 2, ncclInt32, ncclMin, world_, stream_), ncclSuccess);
  EXPECT_EQ(b.get(), (std::vector<int32_t>{0, -(size - 1)}));
  a.put({2, w + 1});
  ASSERT_EQ(ncclAllReduce(a.d, b.d, 2, ncclInt32, ncclProd, world_, stream_), ncclSuccess);
  int32_t fact = 1;
  for (int k = 1; k <= size; ++k) fact *= k;
  EXPECT_EQ(b.get(), (std::vector<int32_t>{1 << size, fact}));
  // float16 and bfloat16 add in float32 and round once per addition: 1 + 2^-9 is below
  // bf16's precision, so in bf16 each rank's 2^-9 is lost against the running 1.
  Buf<uint16_t> h(1), bf(1);
  h.put({__half_as_ushort(__float2half_rn(w == 0 ? 1.0f : 0.5f))});
  bf.put({__bfloat16_as_ushort(__float2bfloat16_rn(w == 0 ? 1.0f : 0.001953125f))});
  ASSERT_EQ(ncclAllReduce(h.d, h.d, 1, ncclFloat16, ncclSum, world_, stream_), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(bf.d, bf.d, 1, ncclBfloat16, ncclSum, world_, stream_), ncclSuccess);
  EXPECT_EQ(__half2float(__ushort_as_half(h.get()[0])), 1.0f + 0.5f * float(size - 1));
  const float bsum = __bfloat162float(__ushort_as_bfloat16(bf.get()[0]));
  EXPECT_GE(bsum, 1.0f);
  EXPECT_LE(bsum, 1.0f + 0.0078125f * float(size - 1));  // each addition rounds to a bf16
}

TEST_F(NcclEmulator, BroadcastReadsOnlyTheRootsSendBuffer) {
  const int w = world_rank(), size = world_size(), root = size - 1;
  Buf<double> send(4), recv(4);
  send.put({w + 0.5, 1, 2, 3});
  // Non-root ranks may pass any sendbuff (NULL here): NCCL reads it on the root only.
  ASSERT_EQ(ncclBroadcast(w == root ? send.d : nullptr, recv.d, 4, ncclFloat64, root, world_, stream_), ncclSuccess)
      << ncclGetLastError(nullptr);
  EXPECT_EQ(recv.get(), (std::vector<double>{root + 0.5, 1, 2, 3}));
  ASSERT_EQ(ncclBcast(send.d, 4, ncclFloat64, 0, world_, stream_), ncclSuccess);
  EXPECT_EQ(send.get(), (std::vector<double>{0.5, 1, 2, 3}));
  // Count 0 touches nothing, so any pointer goes.
  EXPECT_EQ(ncclAllReduce(nullptr, nullptr, 0, ncclFloat32, ncclSum, world_, stream_), ncclSuccess);
}

TEST_F(NcclEmulator, MisuseIsRefusedWithNcclsResultAndAReason) {
  const int size = world_size();
  Buf<float> a(8), big(8 * size_t(size));
  std::vector<float> host_memory(8 * size_t(size));
  auto says = [](const char* part) { return std::string(ncclGetLastError(nullptr)).find(part) != std::string::npos; };
  EXPECT_EQ(ncclAllReduce(host_memory.data(), a.d, 8, ncclFloat32, ncclSum, world_, stream_), ncclInvalidArgument);
  EXPECT_TRUE(says("sendbuff needs 32 bytes of device memory")) << ncclGetLastError(nullptr);
  EXPECT_TRUE(says("host memory")) << ncclGetLastError(nullptr);
  EXPECT_EQ(ncclAllReduce(a.d, a.d, 9, ncclFloat32, ncclSum, world_, stream_), ncclInvalidArgument);
  EXPECT_TRUE(says("runs past") || says("needs 36 bytes")) << ncclGetLastError(nullptr);
  EXPECT_EQ(ncclAllGather(a.d, big.d, 8 + 1, ncclFloat32, world_, stream_), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(a.d, a.d, 8, ncclFloat8e4m3, ncclSum, world_, stream_), ncclInvalidArgument);
  EXPECT_TRUE(says("(fp8) is not emulated"));
  EXPECT_EQ(ncclAllReduce(a.d, a.d, 8, ncclFloat32, ncclAvg, world_, stream_), ncclInvalidArgument);
  EXPECT_TRUE(says("ncclAvg"));
  EXPECT_EQ(ncclAllReduce(a.d, a.d, 8, ncclDataType_t(77), ncclSum, world_, stream_), ncclInvalidArgument);
  EXPECT_EQ(ncclBroadcast(a.d, a.d, 8, ncclFloat32, size, world_, stream_), ncclInvalidArgument);
  EXPECT_TRUE(says("root"));
  EXPECT_EQ(ncclAllReduce(a.d, a.d, 8, ncclFloat32, ncclSum, nullptr, stream_), ncclInvalidArgument);
  if (size > 1) {  // overlapping, but not in NCCL's in-place layout
    const int w = world_rank();
    EXPECT_EQ(ncclAllGather(big.d + (w + 1) % size, big.d, 1, ncclFloat32, world_, stream_), ncclInvalidArgument);
    EXPECT_TRUE(says("in place"));
  }
  if (cuda::device_count() > 1) {  // a stream of another device
    cudaStream_t other = nullptr;
    {
      cuda::DeviceGuard g((rank_device() + 1) % cuda::device_count());
      ASSERT_EQ(cudaStreamCreate(&other), cudaSuccess);
    }
    EXPECT_EQ(ncclAllReduce(a.d, a.d, 8, ncclFloat32, ncclSum, world_, other), ncclInvalidArgument);
    EXPECT_TRUE(says("belongs to cuda:")) << ncclGetLastError(nullptr);
    cudaStreamDestroy(other);
  }
  // After all that, the clique still works.
  a.put(std::vector<float>(8, 1.0f));
  ASSERT_EQ(ncclAllReduce(a.d, a.d, 8, ncclFloat32, ncclSum, world_, stream_), ncclSuccess);
  EXPECT_EQ(a.get()[7], float(size));
}

// A collective waiting for a rank that is late calls the wait hook meanwhile (where a GPU's
// host would wait at a read-back), and ncclCommAbort from the hook ends the wait: the call
// returns ncclRemoteError and the communicator is gone. The late rank's own collective then
// completes against the abandoned ones once the others make MPI progress (the barrier).
TEST_F(NcclEmulator, AbortFromTheWaitHookEndsACollectiveThatWaits) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  static ncclComm_t waiting = nullptr;
  static int hook_calls = 0;
  static std::chrono::steady_clock::time_point t0;
  hook_calls = 0;
  const int late = world_size() - 1;
  Buf<float> a(4);
  a.put(std::vector<float>(4, 1.0f));
  if (world_rank() == late) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    EXPECT_EQ(ncclAllReduce(a.d, a.d, 4, ncclFloat32, ncclSum, world_, stream_), ncclSuccess) << outcome(ncclSuccess);
  } else {
    waiting = world_;
    t0 = std::chrono::steady_clock::now();
    const fsdpEmuNcclWaitHook before = fsdpEmuNcclSetWaitHook([] {
      ++hook_calls;
      if (waiting != nullptr && std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(300)) {
        EXPECT_EQ(ncclCommAbort(waiting), ncclSuccess);  // the call that waits frees it on its way out
        waiting = nullptr;
      }
    });
    const ncclResult_t r = ncclAllReduce(a.d, a.d, 4, ncclFloat32, ncclSum, world_, stream_);
    fsdpEmuNcclSetWaitHook(before);
    EXPECT_EQ(r, ncclRemoteError);
    EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("aborted (ncclCommAbort) while the collective waited"),
              std::string::npos)
        << ncclGetLastError(nullptr);
    EXPECT_GT(hook_calls, 10) << "the hook runs (about every millisecond) while the collective waits";
    int n = 0;
    EXPECT_EQ(ncclCommCount(world_, &n), ncclInvalidArgument) << "an aborted communicator is gone";
    world_ = nullptr;  // nothing left for TearDown to destroy
  }
  EXPECT_EQ(MPI_Barrier(MPI_COMM_WORLD), MPI_SUCCESS);
}

// ---- point-to-point ----

bool says(const std::string& part) { return std::string(ncclGetLastError(nullptr)).find(part) != std::string::npos; }

// A clique of every rank on the TCP transport (as a launch without MPI gets), though MPI is
// up: the transport is chosen by the process that makes the id.
ncclComm_t tcp_world() {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (world_rank() == 0) {
    setenv("FSDP_EMU_NCCL_TRANSPORT", "tcp", 1);
    EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    unsetenv("FSDP_EMU_NCCL_TRANSPORT");
  }
  EXPECT_EQ(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD), MPI_SUCCESS);
  ncclComm_t c = nullptr;
  EXPECT_EQ(ncclCommInitRank(&c, world_size(), id, world_rank()), ncclSuccess) << ncclGetLastError(nullptr);
  return c;
}

// The messages rank `from` sends rank `to`, in order: two short ones (0, 3, 6 or 9 floats;
// every length occurs, zero included), and to the next rank of the ring 1 MiB, which a socket
// takes in many pieces, so a send resumes part-way while the receives progress.
std::vector<size_t> message_lengths(int from, int to, int size) {
  std::vector<size_t> m{size_t((from + 2 * to) % 4) * 3, size_t((from + 2 * to + 3) % 4) * 3};
  if (size > 1 && to == (from + 1) % size) m.push_back(size_t(1) << 18);
  return m;
}
float message_value(int from, int to, size_t k, size_t i) {
  return float(from * 1000 + to * 100 + int(k) * 10) + float(i % 7);
}

// One group: every message to and from every rank (this one included), the receives posted
// first and in reverse rank order, the sends after them; then every byte checked.
void exchange_in_one_group(ncclComm_t comm, cudaStream_t stream) {
  const int me = world_rank(), size = world_size();
  std::vector<float> send, want;
  for (int j = 0; j < size; ++j) {
    const std::vector<size_t> m = message_lengths(me, j, size);
    for (size_t k = 0; k < m.size(); ++k)
      for (size_t i = 0; i < m[k]; ++i) send.push_back(message_value(me, j, k, i));
  }
  for (int i = 0; i < size; ++i) {
    const std::vector<size_t> m = message_lengths(i, me, size);
    for (size_t k = 0; k < m.size(); ++k)
      for (size_t e = 0; e < m[k]; ++e) want.push_back(message_value(i, me, k, e));
  }
  Buf<float> s(send.size()), r(want.size());
  s.put(send);
  r.put(std::vector<float>(want.size(), -1.0f));
  // Where each rank's run starts in recv.
  std::vector<size_t> recv_at(static_cast<size_t>(size) + 1, 0);
  for (int i = 0; i < size; ++i) {
    size_t n = 0;
    for (size_t len : message_lengths(i, me, size)) n += len;
    recv_at[size_t(i) + 1] = recv_at[size_t(i)] + n;
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int i = size - 1; i >= 0; --i) {
    size_t at = recv_at[size_t(i)];
    for (size_t len : message_lengths(i, me, size)) {
      EXPECT_EQ(ncclRecv(len > 0 ? r.d + at : nullptr, len, ncclFloat32, i, comm, stream), ncclSuccess)
          << ncclGetLastError(nullptr);
      at += len;
    }
  }
  size_t at = 0;
  for (int j = 0; j < size; ++j)
    for (size_t len : message_lengths(me, j, size)) {
      EXPECT_EQ(ncclSend(len > 0 ? s.d + at : nullptr, len, ncclFloat32, j, comm, stream), ncclSuccess)
          << ncclGetLastError(nullptr);
      at += len;
    }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  const std::vector<float> got = r.get();
  for (size_t e = 0; e < want.size(); ++e) ASSERT_EQ(got[e], want[e]) << "element " << e;
}

TEST_F(NcclEmulator, AGroupSendsAndReceivesBothWaysAtOnce) {
  exchange_in_one_group(world_, stream_);
  if (world_size() == 1) return;  // a one-rank clique never uses a transport
  ncclComm_t tcp = tcp_world();
  exchange_in_one_group(tcp, stream_);
  EXPECT_EQ(ncclCommDestroy(tcp), ncclSuccess);
}

// Outside a group each call waits for its peer, so a ring passes messages along: rank 0
// sends first, the others receive first. A zero-byte message is a message on both sides: the
// receive of 0 takes it, and the 3 floats after it go to the receive of 3 (a side that
// skipped it would pair the 0 with the 3, and the lengths would differ, or wait forever).
void zero_byte_messages_in_a_ring(ncclComm_t comm, cudaStream_t stream) {
  const int me = world_rank(), size = world_size(), next = (me + 1) % size, prev = (me + size - 1) % size;
  Buf<float> out(3), in(3);
  out.put({float(me), 0.5f, 2.0f});
  in.put({-1.0f, -1.0f, -1.0f});
  const auto send = [&] {
    EXPECT_EQ(ncclSend(nullptr, 0, ncclFloat32, next, comm, stream), ncclSuccess) << ncclGetLastError(nullptr);
    EXPECT_EQ(ncclSend(out.d, 3, ncclFloat32, next, comm, stream), ncclSuccess) << ncclGetLastError(nullptr);
  };
  const auto receive = [&] {
    EXPECT_EQ(ncclRecv(nullptr, 0, ncclFloat32, prev, comm, stream), ncclSuccess) << ncclGetLastError(nullptr);
    EXPECT_EQ(ncclRecv(in.d, 3, ncclFloat32, prev, comm, stream), ncclSuccess) << ncclGetLastError(nullptr);
  };
  if (me == 0) {
    send();
    receive();
  } else {
    receive();
    send();
  }
  EXPECT_EQ(in.get(), (std::vector<float>{float(prev), 0.5f, 2.0f}));
}

TEST_F(NcclEmulator, ZeroByteMessagesAreMatchedInOrder) {
  if (world_size() == 1) {
    // Alone, a send outside a group has nobody to match it: NCCL would wait forever.
    EXPECT_EQ(ncclSend(nullptr, 0, ncclFloat32, 0, world_, stream_), ncclInvalidUsage);
    EXPECT_TRUE(says("sends 1 message(s) to itself but receives 0")) << ncclGetLastError(nullptr);
    return;
  }
  zero_byte_messages_in_a_ring(world_, stream_);
  ncclComm_t tcp = tcp_world();
  zero_byte_messages_in_a_ring(tcp, stream_);
  EXPECT_EQ(ncclCommDestroy(tcp), ncclSuccess);
}

// Every rank sends `sent` floats to the next and receives `posted` from the previous one in
// one group: lengths that differ are refused on the receiving side, which still consumes
// the message, so the next group on the clique works.
void lengths_must_match(ncclComm_t comm, cudaStream_t stream) {
  const int me = world_rank(), size = world_size(), next = (me + 1) % size, prev = (me + size - 1) % size;
  Buf<float> out(5), in(4);
  out.put({1, 2, 3, 4, 5});
  using Case = std::pair<size_t, const char*>;
  for (const auto& [sent, why] : {Case{3, "sent 12 bytes"}, Case{5, "sent more than the 16 bytes"}}) {
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    EXPECT_EQ(ncclSend(out.d, sent, ncclFloat32, next, comm, stream), ncclSuccess);
    EXPECT_EQ(ncclRecv(in.d, 4, ncclFloat32, prev, comm, stream), ncclSuccess);
    EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage) << "sent " << sent;
    EXPECT_TRUE(says("a receive and its matching send differ in length")) << ncclGetLastError(nullptr);
    // The TCP transport knows the length it got, MPI only that it was longer.
    EXPECT_TRUE(says(why) || (sent == 5 && says("sent 20 bytes"))) << ncclGetLastError(nullptr);
  }
  in.put({-1, -1, -1, -1});
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclSend(out.d, 4, ncclFloat32, next, comm, stream), ncclSuccess);
  EXPECT_EQ(ncclRecv(in.d, 4, ncclFloat32, prev, comm, stream), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  EXPECT_EQ(in.get(), (std::vector<float>{1, 2, 3, 4}));
}

TEST_F(NcclEmulator, PointToPointMisuseIsRefused) {
  const int me = world_rank(), size = world_size(), next = (me + 1) % size, prev = (me + size - 1) % size;
  Buf<float> a(8), b(8);
  std::vector<float> host_memory(8);
  EXPECT_EQ(ncclSend(a.d, 8, ncclFloat32, size, world_, stream_), ncclInvalidArgument);
  EXPECT_TRUE(says("peer " + std::to_string(size) + " is not in [0, nranks)")) << ncclGetLastError(nullptr);
  EXPECT_EQ(ncclRecv(a.d, 8, ncclFloat32, -1, world_, stream_), ncclInvalidArgument);
  EXPECT_EQ(ncclSend(host_memory.data(), 8, ncclFloat32, next, world_, stream_), ncclInvalidArgument);
  EXPECT_TRUE(says("sendbuff needs 32 bytes of device memory")) << ncclGetLastError(nullptr);
  EXPECT_EQ(ncclRecv(a.d, 9, ncclFloat32, prev, world_, stream_), ncclInvalidArgument);
  EXPECT_TRUE(says("recvbuff needs 36 bytes")) << ncclGetLastError(nullptr);
  EXPECT_EQ(ncclSend(a.d, 8, ncclFloat32, next, nullptr, stream_), ncclInvalidArgument);

  // A call that fails inside a group fails the group: none of its operations run (the
  // receive leaves b alone), on every rank alike.
  a.put(std::vector<float>(8, 1.0f));
  b.put(std::vector<float>(8, -1.0f));
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclSend(a.d, 8, ncclFloat32, next, world_, stream_), ncclSuccess);
  EXPECT_EQ(ncclRecv(b.d, 8, ncclFloat32, prev, world_, stream_), ncclSuccess);
  EXPECT_EQ(ncclSend(a.d, 8, ncclFloat8e4m3, next, world_, stream_), ncclInvalidArgument);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
  EXPECT_TRUE(says("a call in the group failed (ncclSend: datatype 10 (fp8) is not emulated)"))
      << ncclGetLastError(nullptr);
  EXPECT_EQ(b.get()[0], -1.0f);

  // Nested groups run at the outermost end only.
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclSend(a.d, 8, ncclFloat32, next, world_, stream_), ncclSuccess);
  EXPECT_EQ(ncclRecv(b.d, 8, ncclFloat32, prev, world_, stream_), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(b.get()[0], -1.0f) << "the inner end ran the group";
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(nullptr);
  EXPECT_EQ(b.get()[0], 1.0f);

  // A rank's message to itself needs its receive in the same group.
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclSend(a.d, 8, ncclFloat32, me, world_, stream_), ncclSuccess);
  EXPECT_EQ(ncclRecv(b.d, 4, ncclFloat32, me, world_, stream_), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_TRUE(says("sends 32 bytes to itself to a receive of 16 bytes")) << ncclGetLastError(nullptr);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclRecv(b.d, 4, ncclFloat32, me, world_, stream_), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_TRUE(says("sends 0 message(s) to itself but receives 1")) << ncclGetLastError(nullptr);

  if (size == 1) return;
  lengths_must_match(world_, stream_);
  ncclComm_t tcp = tcp_world();
  lengths_must_match(tcp, stream_);
  EXPECT_EQ(ncclCommDestroy(tcp), ncclSuccess);
}

// ncclCommAbort from the wait hook ends a group whose receive waits for a late rank, as it
// ends a collective: ncclRemoteError, the communicator gone. The late rank sends only when
// told the group has ended (no race on timing), and its send completes against the abandoned
// receive once the waiting rank makes MPI progress (the barrier).
TEST_F(NcclEmulator, AbortFromTheWaitHookEndsAGroupThatWaits) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  static ncclComm_t waiting = nullptr;
  static std::chrono::steady_clock::time_point t0;
  const int late = 1, go_tag = 4242;
  Buf<float> a(4);
  a.put(std::vector<float>(4, 1.0f));
  int go = 0;
  if (world_rank() == late) {
    EXPECT_EQ(MPI_Recv(&go, 1, MPI_INT, 0, go_tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE), MPI_SUCCESS);
    EXPECT_EQ(ncclSend(a.d, 4, ncclFloat32, 0, world_, stream_), ncclSuccess) << ncclGetLastError(nullptr);
  } else if (world_rank() == 0) {
    waiting = world_;
    t0 = std::chrono::steady_clock::now();
    const fsdpEmuNcclWaitHook before = fsdpEmuNcclSetWaitHook([] {
      if (waiting != nullptr && std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(100)) {
        EXPECT_EQ(ncclCommAbort(waiting), ncclSuccess);
        waiting = nullptr;
      }
    });
    EXPECT_EQ(ncclGroupStart(), ncclSuccess);  // no ASSERT: the late rank waits for the go below
    EXPECT_EQ(ncclRecv(a.d, 4, ncclFloat32, late, world_, stream_), ncclSuccess);
    const ncclResult_t r = ncclGroupEnd();
    fsdpEmuNcclSetWaitHook(before);
    EXPECT_EQ(MPI_Send(&go, 1, MPI_INT, late, go_tag, MPI_COMM_WORLD), MPI_SUCCESS);
    EXPECT_EQ(r, ncclRemoteError);
    EXPECT_TRUE(says("aborted (ncclCommAbort) while the point-to-point operations waited"))
        << ncclGetLastError(nullptr);
    int n = 0;
    EXPECT_EQ(ncclCommCount(world_, &n), ncclInvalidArgument) << "an aborted communicator is gone";
    world_ = nullptr;
  }
  EXPECT_EQ(MPI_Barrier(MPI_COMM_WORLD), MPI_SUCCESS);
}

}  // namespace
}  // namespace fsdp::test
#endif  // FSDP_CUDA_EMULATION
