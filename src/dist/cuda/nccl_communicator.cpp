// The NCCL communicator (host code: built by the host compiler, links cudart and nccl; in
// the emulation build the stand-ins of src/cuda_emu). See include/fsdp/dist/nccl.h, Note
// [NCCL stream ordering], for the stream / event contract.
//
// Collectives: ncclAllGather / ncclReduceScatter / ncclAllReduce / ncclBroadcast with
// ncclSum on ncclFloat32 / ncclFloat64 / ncclBfloat16 / ncclFloat16 (NCCL adds halves in float and rounds
// per step, the semantics communicator.h gives), each on the comm stream between a `ready`
// event recorded on the caller's stream and a `done` event recorded after it. Each call
// takes one of kMaxPending request slots holding both events, created up front, so issuing
// and completing collectives never allocates (detail::RequestSlots, shared with the MPI
// backend), and a stale or foreign Request id is refused rather than waited on.
// Zero-element collectives complete at once without calling NCCL (every rank has the
// same sizes, so every rank skips alike).
//
// all_to_all_v: NCCL has no all-to-all-v, so it is one NCCL group (ncclGroupStart / End)
// of an ncclSend and an ncclRecv per other rank with a non-zero count (the counts agree
// pairwise, so a pair skipped here is skipped by the peer too), and this rank's own run a
// device-to-device copy, all on the comm stream between the same two events as a
// collective. It always takes a slot and an in-flight record, even when every count is 0:
// whether a rank has anything to move is its own business, and the watchdog's sequence
// numbers must stay equal across the group's ranks.
//
// Trace (fsdp/core/trace.h): while one records, each collective is a span of the comm
// stream's track, timed by events recorded on that stream around the NCCL call, with its
// group and byte count.
//
// Errors: every CUDA and NCCL call is checked; the message names the call, file:line,
// the group, the rank, the device and the host, with cudaGetErrorString /
// ncclGetErrorString and NCCL's own last-error text. The destructor's calls are not
// checked: teardown errors (driver unloading, a peer gone) are not actionable.
//
// The watchdog (fsdp/dist/watchdog.h): the host never blocks in NCCL, so the collectives in
// flight are watched where the host does wait, for a GPU stream (Note [Host waits] in
// fsdp/core/host_wait.h; in the emulation build inside the NCCL call itself, which runs the
// collective there). Every collective enters a ring of in-flight records with an event of
// its own, recorded after it on the comm stream; the wait hook (poll_in_flight) retires
// records whose event has completed, asks NCCL for asynchronous errors
// (ncclCommGetAsyncError), and hands the oldest record still in flight to the watchdog,
// which reports and aborts the job once it is older than dist.timeout_s, first aborting
// every NCCL communicator (ncclCommAbort) so no kernel spins on.
//
// Built only where NCCL is (FSDP_WITH_NCCL: CMake found it, or the emulation build): a
// CUDA toolkit need not ship NCCL, and without it this file compiles to nothing, so
// make_nccl_communicator stays undefined rather than the whole link failing.
#if defined(FSDP_WITH_NCCL)
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../detail.h"
#include "fsdp/core/cuda.h"
#include "fsdp/core/cuda_check.h"
#include "fsdp/core/host_wait.h"
#include "fsdp/core/nvtx.h"
#include "fsdp/core/trace.h"
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
  return fmt::format("group '{}' (rank {} of {}, cuda:{}, host {})", *c.group, c.rank, c.size, c.device, host_name());
}

[[noreturn]] void nccl_fail(ncclResult_t r, const char* call, ncclComm_t comm, const Context& c, const char* file,
                            int line) {
  const char* last = ncclGetLastError(comm);
  fail_call({call, describe(c), fmt::format("{} (ncclResult_t {})", ncclGetErrorString(r), int(r)),
             last != nullptr && last[0] != '\0' ? fmt::format("; NCCL says: {}", last) : std::string(), file, line});
}

// ggml's CUDA_CHECK / nccl-tests' NCCLCHECK: the call text and where it ran. Named apart
// from fsdp/core/cuda_check.h's FSDP_CUDA_CHECK: these add the group and rank.
#define FSDP_NCCL_CUDA_CHECK(call)                                                   \
  do {                                                                               \
    const cudaError_t fsdp_cuda_err_ = (call);                                       \
    if (fsdp_cuda_err_ != cudaSuccess) [[unlikely]]                                  \
      cuda::cuda_fail(fsdp_cuda_err_, #call, __FILE__, __LINE__, describe(context()).c_str()); \
  } while (0)

#define FSDP_NCCL_CHECK(call)                                                        \
  do {                                                                               \
    const ncclResult_t fsdp_nccl_res_ = (call);                                      \
    if (fsdp_nccl_res_ != ncclSuccess) [[unlikely]]                                  \
      nccl_fail(fsdp_nccl_res_, #call, comm_, context(), __FILE__, __LINE__);        \
  } while (0)

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    case DType::U8: return ncclUint8;
    default: FSDP_FAIL("no NCCL datatype for {}", dtype_name(t));
  }
}

// The events of one request slot (see nccl.h).
struct Events {
  cudaEvent_t ready = nullptr;  // on the caller's stream: the inputs are there
  cudaEvent_t done = nullptr;   // on the comm stream: the collective has finished
};

using Clock = std::chrono::steady_clock;

// A collective in flight on the GPU, for the watchdog (see the file comment).
struct InFlight {
  uint64_t seq = 0;
  Collective op = Collective::AllReduce;
  Clock::time_point issued;
  bool recorded = false;  // its event follows it on the comm stream (false while the call runs)
};

class NcclCommunicatorImpl;
std::vector<NcclCommunicatorImpl*>& live_communicators();
void poll_in_flight();

class NcclCommunicatorImpl final : public NcclCommunicator {
 public:
  NcclCommunicatorImpl(Communicator& bootstrap, int device, void* stream)
      : name_(bootstrap.name()),
        rank_(bootstrap.rank()),
        size_(bootstrap.size()),
        device_(device),
        stream_(static_cast<cudaStream_t>(stream)) {
    world_ranks_ = bootstrap.world_ranks();
    for (int op = 0; op < int(nvtx_names_.size()); ++op)
      nvtx_names_[size_t(op)] = fmt::format("nccl {} (group '{}')", detail::collective_name(Collective(op)), name_);
    int count = 0;
    FSDP_NCCL_CUDA_CHECK(cudaGetDeviceCount(&count));
    FSDP_CHECK(device_ < count, "NCCL communicator for group '{}' (rank {} of {}): cuda:{} requested, but this "
               "process sees {} CUDA device(s)", name_, rank_, size_, device_, count);
    const cuda::DeviceGuard guard(device_);
    try {
      init(bootstrap);
    } catch (...) {
      release();  // a constructor that throws gets no destructor
      throw;
    }
    watch_id_ = detail::watch_group(name_, world_ranks_);
    live_communicators().push_back(this);
    // Right before the watchdog's MPI_Abort: no kernel of ours may spin on.
    detail::on_watchdog_abort(this, [this] {
      if (comm_ != nullptr) (void)ncclCommAbort(comm_);
      comm_ = nullptr;
    });
    cuda::set_host_wait_hook(&poll_in_flight);
#if defined(NCCL_EMULATION)
    fsdpEmuNcclSetWaitHook(&poll_in_flight);
#endif
  }

  ~NcclCommunicatorImpl() override {
    detail::forget_watchdog_abort(this);
    auto& live = live_communicators();
    live.erase(std::remove(live.begin(), live.end(), this), live.end());
    if (watch_id_ >= 0) detail::forget_group(watch_id_);
    int previous = -1;
    (void)cudaGetDevice(&previous);
    (void)cudaSetDevice(device_);
    release();
    if (previous >= 0) (void)cudaSetDevice(previous);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }
  int cuda_device() const override { return device_; }
  void* comm_stream() const override { return stream_; }

  Request all_gather(const Tensor& shard, const Tensor& full) override {
    detail::check_all_gather(*this, shard, full);  // in place: NCCL takes shard == full + rank * n as is
    detail::check_device(*this, Collective::AllGather, shard, Device::cuda(device_), "NCCL");
    if (shard.numel() == 0) return counted(0);
    FSDP_NVTX_RANGE(nvtx_names_[size_t(Collective::AllGather)].c_str());
    const cuda::DeviceGuard guard(device_);
    return enqueue(Collective::AllGather, 0, shard, ring_bytes(Collective::AllGather, 0, shard), [&] {
      FSDP_NCCL_CHECK(ncclAllGather(shard.data_ptr(), full.data_ptr(), size_t(shard.numel()),
                                    nccl_type(shard.dtype()), comm_, stream_));
    });
  }

  Request reduce_scatter(const Tensor& full, const Tensor& shard) override {
    detail::check_reduce_scatter(*this, full, shard);
    detail::check_device(*this, Collective::ReduceScatter, shard, Device::cuda(device_), "NCCL");
    if (shard.numel() == 0) return counted(0);
    FSDP_NVTX_RANGE(nvtx_names_[size_t(Collective::ReduceScatter)].c_str());
    const cuda::DeviceGuard guard(device_);
    return enqueue(Collective::ReduceScatter, 0, shard, ring_bytes(Collective::ReduceScatter, 0, shard), [&] {
      FSDP_NCCL_CHECK(ncclReduceScatter(full.data_ptr(), shard.data_ptr(), size_t(shard.numel()),
                                        nccl_type(shard.dtype()), ncclSum, comm_, stream_));
    });
  }

  Request all_reduce(const Tensor& x) override {
    detail::check_all_reduce(*this, x);
    detail::check_device(*this, Collective::AllReduce, x, Device::cuda(device_), "NCCL");
    if (x.numel() == 0) return counted(0);
    FSDP_NVTX_RANGE(nvtx_names_[size_t(Collective::AllReduce)].c_str());
    const cuda::DeviceGuard guard(device_);
    return enqueue(Collective::AllReduce, 0, x, ring_bytes(Collective::AllReduce, 0, x), [&] {
      FSDP_NCCL_CHECK(
          ncclAllReduce(x.data_ptr(), x.data_ptr(), size_t(x.numel()), nccl_type(x.dtype()), ncclSum, comm_, stream_));
    });
  }

  Request broadcast(const Tensor& x, int root) override {
    detail::check_broadcast(*this, x, root);
    detail::check_device(*this, Collective::Broadcast, x, Device::cuda(device_), "NCCL");
    if (x.numel() == 0) return counted(0);
    FSDP_NVTX_RANGE(nvtx_names_[size_t(Collective::Broadcast)].c_str());
    const cuda::DeviceGuard guard(device_);
    return enqueue(Collective::Broadcast, root, x, ring_bytes(Collective::Broadcast, root, x), [&] {
      FSDP_NCCL_CHECK(
          ncclBroadcast(x.data_ptr(), x.data_ptr(), size_t(x.numel()), nccl_type(x.dtype()), root, comm_, stream_));
    });
  }

  Request all_to_all_v(const Tensor& send, const std::vector<int64_t>& send_counts, const Tensor& recv,
                       const std::vector<int64_t>& recv_counts) override {
    detail::check_all_to_all_v(*this, send, send_counts, recv, recv_counts);
    detail::check_device(*this, Collective::AllToAllV, send, Device::cuda(device_), "NCCL");
    FSDP_NVTX_RANGE(nvtx_names_[size_t(Collective::AllToAllV)].c_str());
    const cuda::DeviceGuard guard(device_);
    const size_t elem = size_t(dtype_size(send.dtype()));
    const uint64_t bytes = detail::all_to_all_v_bytes(rank_, send_counts, elem);
    return enqueue(Collective::AllToAllV, 0, send, bytes, [&] {
      const ncclDataType_t type = nccl_type(send.dtype());
      auto* from = static_cast<char*>(send.data_ptr());
      auto* to = static_cast<char*>(recv.data_ptr());
      bool peers = false;
      size_t own_from = 0, own_to = 0;  // where this rank's own run starts in send and in recv
      for (size_t j = 0; j < size_t(size_); ++j) {
        if (int(j) != rank_) peers = peers || send_counts[j] > 0 || recv_counts[j] > 0;
        if (int(j) < rank_) {
          own_from += size_t(send_counts[j]);
          own_to += size_t(recv_counts[j]);
        }
      }
      if (peers) {
        FSDP_NCCL_CHECK(ncclGroupStart());
        try {
          size_t sent = 0, received = 0;  // elements before run j
          for (size_t j = 0; j < size_t(size_); ++j) {
            const size_t n_send = size_t(send_counts[j]), n_recv = size_t(recv_counts[j]);
            const int peer = int(j);
            if (peer != rank_ && n_send > 0)
              FSDP_NCCL_CHECK(ncclSend(from + sent * elem, n_send, type, peer, comm_, stream_));
            if (peer != rank_ && n_recv > 0)
              FSDP_NCCL_CHECK(ncclRecv(to + received * elem, n_recv, type, peer, comm_, stream_));
            sent += n_send;
            received += n_recv;
          }
        } catch (...) {
          (void)ncclGroupEnd();  // NCCL drops a group one of whose calls failed; it must still be closed
          throw;
        }
        FSDP_NCCL_CHECK(ncclGroupEnd());
      }
      if (const size_t own = size_t(send_counts[size_t(rank_)]); own > 0)
        FSDP_NCCL_CUDA_CHECK(
            cudaMemcpyAsync(to + own_to * elem, from + own_from * elem, own * elem, cudaMemcpyDeviceToDevice, stream_));
    });
  }

  // A one-element all-reduce on the comm stream, waited on the host: NCCL has no barrier.
  void barrier() override {
    const cuda::DeviceGuard guard(device_);
    if (barrier_buf_ == nullptr) {
      FSDP_NCCL_CUDA_CHECK(cudaMalloc(&barrier_buf_, sizeof(float)));
      FSDP_NCCL_CUDA_CHECK(cudaMemsetAsync(barrier_buf_, 0, sizeof(float), stream_));
    }
    const uint64_t seq = track(Collective::Barrier);
    try {
      FSDP_NCCL_CHECK(ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclFloat32, ncclSum, comm_, stream_));
    } catch (...) {
      untrack();
      throw;
    }
    recorded(seq);
    cuda::wait_for_stream(stream_);
    check_async_error();
  }

  // The wait hook's work for this communicator: retires the records that completed, and
  // returns the oldest one still in flight (nullptr: none) and NCCL's asynchronous error
  // (ncclSuccess: none).
  const InFlight* oldest_in_flight(ncclResult_t* async) {
    *async = ncclSuccess;
    if (comm_ == nullptr) return nullptr;
    if (ncclCommGetAsyncError(comm_, async) != ncclSuccess) *async = ncclSuccess;  // the check itself failed: ignore
    const cuda::DeviceGuard guard(device_);
    while (in_flight_count_ > 0) {
      const size_t k = in_flight_head_ % kInFlight;
      if (!in_flight_[k].recorded || cudaEventQuery(in_flight_events_[k]) != cudaSuccess) return &in_flight_[k];
      ++in_flight_head_;
      --in_flight_count_;
    }
    return nullptr;
  }

  int watch_id() const { return watch_id_; }
  std::string async_error_text(ncclResult_t r) const {
    const char* last = comm_ != nullptr ? ncclGetLastError(comm_) : nullptr;
    return fmt::format("NCCL: {}{}", ncclGetErrorString(r),
                       last != nullptr && last[0] != '\0' ? fmt::format("; NCCL says: {}", last) : std::string());
  }

  void wait(Request r) override {
    if (r.id == -1) return;
    const Slot& s = slots_.take(*this, r);
    const auto t0 = std::chrono::steady_clock::now();
    const cuda::DeviceGuard guard(device_);
    check_async_error();
    FSDP_NCCL_CUDA_CHECK(cudaStreamWaitEvent(compute_stream(), s.handle.done, 0));
    stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

 private:
  using Slot = detail::RequestSlots<Events>::Slot;

  // The constructor's work, with device_ current: the comm stream, the events, and the
  // NCCL communicator (a collective over the bootstrap group).
  void init(Communicator& bootstrap) {
    if (stream_ == nullptr) {
      FSDP_NCCL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      owns_stream_ = true;
    }
    trace::name_stream(device_, stream_, fmt::format("communication (group '{}')", name_));
    for (Slot& s : slots_.all()) {
      FSDP_NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&s.handle.ready, cudaEventDisableTiming));
      FSDP_NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&s.handle.done, cudaEventDisableTiming));
    }
    for (cudaEvent_t& e : in_flight_events_) FSDP_NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));

    // The unique id travels as 64 bfloat16 elements: MPI moves that type as raw bytes.
    static_assert(sizeof(ncclUniqueId) == 128);
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (rank_ == 0) FSDP_NCCL_CHECK(ncclGetUniqueId(&id));
    const Tensor id_bytes = Tensor::from_blob(&id, {int64_t(sizeof(id) / 2)}, DType::BF16);
    bootstrap.wait(bootstrap.broadcast(id_bytes, 0));
    FSDP_NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
  }

  // Everything init() made, whatever it got to; unchecked (see the file comment).
  void release() {
    if (comm_ != nullptr) (void)ncclCommDestroy(comm_);
    comm_ = nullptr;
    if (barrier_buf_ != nullptr) (void)cudaFree(barrier_buf_);
    barrier_buf_ = nullptr;
    if (owns_stream_ && stream_ != nullptr) {
      (void)cudaStreamSynchronize(stream_);
      (void)cudaStreamDestroy(stream_);
      stream_ = nullptr;
    }
    for (Slot& s : slots_.all()) {
      if (s.handle.ready != nullptr) (void)cudaEventDestroy(s.handle.ready);
      if (s.handle.done != nullptr) (void)cudaEventDestroy(s.handle.done);
      s.handle = Events{};
    }
    for (cudaEvent_t& e : in_flight_events_) {
      if (e != nullptr) (void)cudaEventDestroy(e);
      e = nullptr;
    }
  }

  // A new in-flight record for the collective about to be enqueued; returns its sequence
  // number. A full ring first waits (under the host-wait hook) for its oldest record.
  uint64_t track(Collective op) {
    while (in_flight_count_ == kInFlight) {
      cuda::wait_for_stream(stream_);
      ncclResult_t async = ncclSuccess;
      oldest_in_flight(&async);
    }
    const size_t k = (in_flight_head_ + in_flight_count_) % kInFlight;
    in_flight_[k] = InFlight{detail::count_collective(watch_id_), op, Clock::now(), false};
    ++in_flight_count_;
    return in_flight_[k].seq;
  }

  // The newest record, of a collective whose NCCL call failed: it never ran.
  void untrack() {
    const size_t k = (in_flight_head_ + in_flight_count_ - 1) % kInFlight;
    if (in_flight_count_ > 0 && !in_flight_[k].recorded) --in_flight_count_;
  }

  // The collective `seq` is enqueued: its event goes on the comm stream after it.
  void recorded(uint64_t seq) {
    const size_t k = (in_flight_head_ + in_flight_count_ - 1) % kInFlight;
    if (in_flight_count_ == 0 || in_flight_[k].seq != seq) return;
    FSDP_NCCL_CUDA_CHECK(cudaEventRecord(in_flight_events_[k], stream_));
    in_flight_[k].recorded = true;
  }

  Context context() const { return Context{&name_, rank_, size_, device_}; }

  // The stream the caller's work on this device goes to (Note [CUDA current stream]).
  cudaStream_t compute_stream() const { return static_cast<cudaStream_t>(cuda::current_stream(device_)); }

  // One collective on `t` (what this rank sends), counted as `bytes` sent: a slot, its
  // in-flight record, the NCCL calls (`call`; a failed one leaves no record behind) inside
  // its trace span on the comm stream, and the slot's `done` event.
  template <typename Call>
  Request enqueue(Collective op, int root, const Tensor& t, uint64_t bytes, Call&& call) {
    const int slot = begin(op);
    try {
      std::optional<trace::StreamSpan> span;
      if (trace::enabled())
        span.emplace(device_, stream_, detail::collective_name(op), "collective",
                     detail::collective_trace_args(*this, op, t, bytes, root));
      call();
    } catch (...) {
      untrack();
      throw;
    }
    return issued(slot, bytes);
  }

  // A free slot, with the comm stream ordered after the caller's stream, and the
  // collective's in-flight record.
  int begin(Collective op) {
    const int slot = slots_.acquire(*this, device_);
    const cudaStream_t caller = compute_stream();
    if (caller != stream_) {
      FSDP_NCCL_CUDA_CHECK(cudaEventRecord(slots_[slot].handle.ready, caller));
      FSDP_NCCL_CUDA_CHECK(cudaStreamWaitEvent(stream_, slots_[slot].handle.ready, 0));
    }
    pending_seq_ = track(op);
    return slot;
  }

  // NCCL reports failures of enqueued work (a peer gone, a network error) asynchronously.
  void check_async_error() {
    ncclResult_t async = ncclSuccess;
    FSDP_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
    if (async != ncclSuccess) [[unlikely]]
      nccl_fail(async, "an earlier collective (ncclCommGetAsyncError)", comm_, context(), __FILE__, __LINE__);
  }

  // What a collective of `t` sends from this rank under the ring algorithm (communicator.h).
  uint64_t ring_bytes(Collective op, int root, const Tensor& t) const {
    return detail::ring_bytes(op, size_, rank_, root, t.nbytes());
  }

  Request counted(uint64_t bytes) {
    ++stats_.calls;
    stats_.bytes_sent += bytes;
    trace::add_bytes_sent(bytes);
    return {};
  }

  Request issued(int slot, uint64_t bytes) {
    recorded(pending_seq_);
    FSDP_NCCL_CUDA_CHECK(cudaEventRecord(slots_[slot].handle.done, stream_));
    counted(bytes);
    return slots_.issue(slot);
  }

  std::string name_;
  int rank_, size_, device_;
  cudaStream_t stream_;
  bool owns_stream_ = false;
  ncclComm_t comm_ = nullptr;
  detail::RequestSlots<Events> slots_;
  void* barrier_buf_ = nullptr;
  // Made once, a name per collective but the barrier (last in Collective): a range per call
  // must not allocate.
  std::array<std::string, detail::kCollectiveKinds - 1> nvtx_names_;
  // The watchdog's view: this group's registration, and the ring of collectives in flight
  // (a step enqueues a few per unit; the host waits for the GPU at least once a step).
  int watch_id_ = -1;
  static constexpr size_t kInFlight = 512;
  std::array<InFlight, kInFlight> in_flight_{};
  std::array<cudaEvent_t, kInFlight> in_flight_events_{};
  size_t in_flight_head_ = 0, in_flight_count_ = 0;
  uint64_t pending_seq_ = 0;
};

std::vector<NcclCommunicatorImpl*>& live_communicators() {
  static std::vector<NcclCommunicatorImpl*> live;
  return live;
}

// The host-wait hook (Note [Host waits]): the oldest collective in flight over every NCCL
// communicator of this process, or its asynchronous error, to the watchdog.
void poll_in_flight() {
  const InFlight* oldest = nullptr;
  const NcclCommunicatorImpl* owner = nullptr;
  for (NcclCommunicatorImpl* c : live_communicators()) {
    ncclResult_t async = ncclSuccess;
    const InFlight* f = c->oldest_in_flight(&async);
    if (async != ncclSuccess) {
      const std::string why = c->async_error_text(async);
      detail::watched_poll(c->watch_id(), f != nullptr ? f->op : Collective::Barrier, f != nullptr ? f->seq : 0, 0,
                           &why);
      return;
    }
    if (f != nullptr && (oldest == nullptr || f->issued < oldest->issued)) {
      oldest = f;
      owner = c;
    }
  }
  if (oldest == nullptr) {
    detail::watched_poll(-1, Collective::Barrier, 0, 0, nullptr);
    return;
  }
  detail::watched_poll(owner->watch_id(), oldest->op, oldest->seq,
                       std::chrono::duration<double>(Clock::now() - oldest->issued).count(), nullptr);
}

}  // namespace

std::unique_ptr<NcclCommunicator> make_nccl_communicator(Communicator& bootstrap_group, int cuda_device,
                                                         void* comm_stream) {
  FSDP_CHECK(cuda_device >= 0, "make_nccl_communicator: cuda device {} is not a device index", cuda_device);
  return std::make_unique<NcclCommunicatorImpl>(bootstrap_group, cuda_device, comm_stream);
}

}  // namespace fsdp::dist

#endif  // FSDP_WITH_NCCL
