// The emulation build's NCCL stand-in (src/cuda_emu/include/nccl.h) through NCCL's own API,
// under mpiexec: cliques over some of the ranks and in another rank order, the documented
// semantics the communicator does not use (in-place reduce-scatter, non-in-place
// broadcast and all-reduce, the other reductions and types), the misuse it refuses
// the way a GPU or NCCL would, and ncclCommAbort ending a collective that waits. Every refusal is decided locally, before communication, so
// all ranks fail alike and none waits for another.
#include <gtest/gtest.h>

#if defined(FSDP_CUDA_EMULATION)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
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

}  // namespace
}  // namespace fsdp::test
#endif  // FSDP_CUDA_EMULATION
