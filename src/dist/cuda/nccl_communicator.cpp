// The NCCL communicator (host code: built by the host compiler, links cudart and nccl).
// See include/fsdp/dist/nccl.h for the stream / event contract.
//
// Collectives: ncclAllGather / ncclReduceScatter / ncclAllReduce / ncclBroadcast with
// ncclSum on ncclFloat32 / ncclFloat64 / ncclBfloat16 (NCCL adds bf16 in float and
// rounds per step, the semantics communicator.h gives). Each call takes one of
// kMaxPending request slots, each with its own cudaEvent created up front, so issuing and
// completing collectives never allocates (detail::RequestSlots, shared with the MPI
// backend), and a stale or foreign Request id is refused rather than waited on.
// Zero-element collectives complete at once without calling NCCL (every rank has the
// same sizes, so every rank skips alike).
//
// Errors: every CUDA and NCCL call is checked; the message names the call, file:line,
// the group, the rank, the device and the host, with cudaGetErrorString /
// ncclGetErrorString and NCCL's own last-error text.
//
// Built only where CMake found NCCL and links it (it defines FSDP_WITH_NCCL): a CUDA
// toolkit need not ship NCCL, and without it this file compiles to nothing, so
// make_nccl_communicator stays undefined rather than the whole link failing.
#if defined(FSDP_WITH_NCCL)
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "../detail.h"
#include "fsdp/dist/nccl.h"

namespace fsdp::dist {
namespace {

using detail::Collective;

// Who is failing, for error messages.
struct Context {
  const std::string* group;
  int rank, size, device;
};

std::string describe(const Context& c) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return fmt::format("group '{}' (rank {} of {}, cuda:{}, host {})", *c.group, c.rank, c.size, c.device, host);
}

[[noreturn]] void cuda_fail(cudaError_t e, const char* call, const Context& c, const char* file, int line) {
  throw_error(file, line, nullptr,
              fmt::format("{} failed on {}: {} ({})", call, describe(c), cudaGetErrorString(e), cudaGetErrorName(e)));
}

[[noreturn]] void nccl_fail(ncclResult_t r, const char* call, ncclComm_t comm, const Context& c, const char* file,
                            int line) {
  const char* last = ncclGetLastError(comm);
  throw_error(file, line, nullptr,
              fmt::format("{} failed on {}: {}{}{}", call, describe(c), ncclGetErrorString(r),
                          last != nullptr && last[0] != '\0' ? "; NCCL says: " : "", last != nullptr ? last : ""));
}

// ggml's CUDA_CHECK / nccl-tests' NCCLCHECK: the call text and where it ran.
#define FSDP_CUDA_CHECK(call)                                                                       \
  do {                                                                                              \
    const cudaError_t fsdp_cuda_err_ = (call);                                                      \
    if (fsdp_cuda_err_ != cudaSuccess) [[unlikely]] cuda_fail(fsdp_cuda_err_, #call, context(), __FILE__, __LINE__); \
  } while (0)

#define FSDP_NCCL_CHECK(call)                                                                                    \
  do {                                                                                                           \
    const ncclResult_t fsdp_nccl_res_ = (call);                                                                  \
    if (fsdp_nccl_res_ != ncclSuccess) [[unlikely]]                                                              \
      nccl_fail(fsdp_nccl_res_, #call, comm_, context(), __FILE__, __LINE__);                                    \
  } while (0)

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::BF16: return ncclBfloat16;
    default: FSDP_FAIL("no NCCL datatype for {}", dtype_name(t));
  }
}

class NcclCommunicatorImpl final : public NcclCommunicator {
 public:
  NcclCommunicatorImpl(Communicator& bootstrap, int device, void* stream)
      : name_(bootstrap.name()),
        rank_(bootstrap.rank()),
        size_(bootstrap.size()),
        device_(device),
        stream_(static_cast<cudaStream_t>(stream)) {
    FSDP_CUDA_CHECK(cudaSetDevice(device_));
    for (Slot& s : slots_.all()) FSDP_CUDA_CHECK(cudaEventCreateWithFlags(&s.handle, cudaEventDisableTiming));

    // The unique id travels as 64 bfloat16 elements: MPI moves that type as raw bytes.
    static_assert(sizeof(ncclUniqueId) == 128);
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (rank_ == 0) FSDP_NCCL_CHECK(ncclGetUniqueId(&id));
    const Tensor id_bytes = Tensor::from_blob(&id, {int64_t(sizeof(id) / 2)}, DType::BF16);
    bootstrap.wait(bootstrap.broadcast(id_bytes, 0));
    FSDP_NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
  }

  ~NcclCommunicatorImpl() override {
    // Teardown errors (driver unloading, a peer gone) are not actionable here.
    cudaSetDevice(device_);
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    if (barrier_buf_ != nullptr) cudaFree(barrier_buf_);
    for (Slot& s : slots_.all())
      if (s.handle != nullptr) cudaEventDestroy(s.handle);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }
  int cuda_device() const override { return device_; }
  void* comm_stream() const override { return stream_; }

  Request all_gather(const Tensor& shard, const Tensor& full) override {
    detail::check_all_gather(*this, shard, full);  // in place: NCCL takes shard == full + rank * n as is
    detail::check_device(*this, Collective::AllGather, shard, Device::cuda(device_), "NCCL");
    if (shard.numel() == 0) return counted(Collective::AllGather, 0, 0);
    const int slot = slots_.acquire(*this, device_);
    FSDP_NCCL_CHECK(ncclAllGather(shard.data_ptr(), full.data_ptr(), size_t(shard.numel()), nccl_type(shard.dtype()),
                                  comm_, stream_));
    return issued(slot, Collective::AllGather, 0, shard.nbytes());
  }

  Request reduce_scatter(const Tensor& full, const Tensor& shard) override {
    detail::check_reduce_scatter(*this, full, shard);
    detail::check_device(*this, Collective::ReduceScatter, shard, Device::cuda(device_), "NCCL");
    if (shard.numel() == 0) return counted(Collective::ReduceScatter, 0, 0);
    const int slot = slots_.acquire(*this, device_);
    FSDP_NCCL_CHECK(ncclReduceScatter(full.data_ptr(), shard.data_ptr(), size_t(shard.numel()),
                                      nccl_type(shard.dtype()), ncclSum, comm_, stream_));
    return issued(slot, Collective::ReduceScatter, 0, shard.nbytes());
  }

  Request all_reduce(const Tensor& x) override {
    detail::check_all_reduce(*this, x);
    detail::check_device(*this, Collective::AllReduce, x, Device::cuda(device_), "NCCL");
    if (x.numel() == 0) return counted(Collective::AllReduce, 0, 0);
    const int slot = slots_.acquire(*this, device_);
    FSDP_NCCL_CHECK(
        ncclAllReduce(x.data_ptr(), x.data_ptr(), size_t(x.numel()), nccl_type(x.dtype()), ncclSum, comm_, stream_));
    return issued(slot, Collective::AllReduce, 0, x.nbytes());
  }

  Request broadcast(const Tensor& x, int root) override {
    detail::check_broadcast(*this, x, root);
    detail::check_device(*this, Collective::Broadcast, x, Device::cuda(device_), "NCCL");
    if (x.numel() == 0) return counted(Collective::Broadcast, root, 0);
    const int slot = slots_.acquire(*this, device_);
    FSDP_NCCL_CHECK(
        ncclBroadcast(x.data_ptr(), x.data_ptr(), size_t(x.numel()), nccl_type(x.dtype()), root, comm_, stream_));
    return issued(slot, Collective::Broadcast, root, x.nbytes());
  }

  // A one-element all-reduce on the comm stream, waited on the host: NCCL has no barrier.
  void barrier() override {
    if (barrier_buf_ == nullptr) FSDP_CUDA_CHECK(cudaMalloc(&barrier_buf_, sizeof(float)));
    FSDP_NCCL_CHECK(ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclFloat32, ncclSum, comm_, stream_));
    FSDP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void wait(Request r) override {
    if (r.id == -1) return;
    Slot& s = slots_.take(*this, r);
    const auto t0 = std::chrono::steady_clock::now();
    FSDP_CUDA_CHECK(cudaEventSynchronize(s.handle));
    ncclResult_t async = ncclSuccess;
    FSDP_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
    FSDP_NCCL_CHECK(async);
    stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  void* event_of(Request r) override {
    if (r.id == -1) return nullptr;  // nothing to wait for; cudaStreamWaitEvent is skipped by the caller
    return slots_.take(*this, r).handle;
  }

 private:
  using Slot = detail::RequestSlots<cudaEvent_t>::Slot;

  Context context() const { return Context{&name_, rank_, size_, device_}; }

  Request counted(Collective op, int root, uint64_t nbytes) {
    ++stats_.calls;
    stats_.bytes_sent += detail::ring_bytes(op, size_, rank_, root, nbytes);
    return {};
  }

  Request issued(int slot, Collective op, int root, uint64_t nbytes) {
    FSDP_CUDA_CHECK(cudaEventRecord(slots_[slot].handle, stream_));
    counted(op, root, nbytes);
    return slots_.issue(slot);
  }

  std::string name_;
  int rank_, size_, device_;
  cudaStream_t stream_;
  ncclComm_t comm_ = nullptr;
  detail::RequestSlots<cudaEvent_t> slots_;
  void* barrier_buf_ = nullptr;
};

}  // namespace

std::unique_ptr<NcclCommunicator> make_nccl_communicator(Communicator& bootstrap_group, int cuda_device,
                                                         void* comm_stream) {
  FSDP_CHECK(cuda_device >= 0, "make_nccl_communicator: cuda device {} is not a device index", cuda_device);
  return std::make_unique<NcclCommunicatorImpl>(bootstrap_group, cuda_device, comm_stream);
}

}  // namespace fsdp::dist

#endif  // FSDP_WITH_NCCL
