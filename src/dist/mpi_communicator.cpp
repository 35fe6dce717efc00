// The MPI communicator: collectives on host tensors over one MPI_Comm (OpenMPI 4.1).
//
// Every call is an MPI non-blocking collective (MPI_Iallgather, MPI_Ireduce_scatter_block,
// MPI_Iallreduce, MPI_Ibcast, MPI_Ialltoallv) whose MPI_Request lives in a detail::RequestSlots table
// (detail.h), so a training step issues and waits collectives without touching the heap
// (our side of it: what the MPI library does inside is its own business), and a stale or
// foreign Request id throws instead of waiting on someone else's collective.
//
// Datatypes: float32 / float64 natively (MPI_FLOAT / MPI_DOUBLE, MPI_SUM); bfloat16 and
// float16 as a 2-byte contiguous type with a commutative user op per type that adds in
// float32 and rounds once per addition (the semantics communicator.h promises).
//
// Errors: the communicator's MPI_Comm uses MPI_ERRORS_RETURN (inherited from
// MPI_COMM_WORLD, set in bootstrap.cpp), and every MPI call goes through FSDP_MPI_CHECK,
// which throws fsdp::Error naming the call, the group, the ranks and the host.
//
// Trace (fsdp/core/trace.h): while one records, each collective is an async span from its
// issue to the end of its wait (several are in flight at once, so they cannot nest on one
// track), with its group and byte count, and the time wait() blocks is a span of the
// waiting thread ("wait all_gather (group 'shard')").
//
// Progress: OpenMPI 4.1 progresses non-blocking collectives only inside MPI calls, so on
// the CPU backend a collective mostly runs inside wait(); issuing early still lets
// small collectives finish eagerly and keeps the engine's code the same as with NCCL.
//
// Deadlines: wait() and barrier() (an MPI_Ibarrier) poll with MPI_Test under the watchdog
// (fsdp/dist/watchdog.h), which reports and aborts the job when a collective outlives
// dist.timeout_s or MPI reports it failed; with the watchdog off they are MPI_Wait.
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <array>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>

#include "detail.h"
#include "fsdp/core/trace.h"
#include "fsdp/dist/communicator.h"
#include "fsdp/dist/watchdog.h"

namespace fsdp::dist::detail {

std::string mpi_error_string(int rc) {
  char err[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, err, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", rc);
  return err;
}

[[noreturn]] void mpi_fail(int rc, const char* call, const char* group, int group_rank, int group_size,
                           const char* file, int line) {
  const std::string err = mpi_error_string(rc);
  int world_rank = -1, initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const std::string rank_text =
      group_rank >= 0 ? fmt::format("rank {} of {}, ", group_rank, group_size) : std::string();
  const std::string world_text = world_rank >= 0 ? fmt::format("world rank {}", world_rank) : "world rank unknown";
  fail_call({call, fmt::format("group '{}' ({}{} on host {})", group, rank_text, world_text, host_name()), err, "",
             file, line});
}

}  // namespace fsdp::dist::detail

namespace fsdp::dist {
namespace {

using detail::Collective;

// ---- bfloat16 and float16: 2-byte types and float32-accumulating sums ----

template <typename H, float (*ToFloat)(H), H (*FromFloat)(float)>
void half_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const H*>(in);
  auto* b = static_cast<H*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = FromFloat(ToFloat(a[i]) + ToFloat(b[i]));
}

struct HalfMpi {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op bf16_sum = MPI_OP_NULL, f16_sum = MPI_OP_NULL;
};

// Created once, on the first communicator (MPI frees them at MPI_Finalize). One 2-byte
// datatype serves both: the op, not the type, knows how to add.
const HalfMpi& half_mpi() {
  static const HalfMpi v = [] {
    HalfMpi r;
    FSDP_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &r.type), "world", -1, 0);
    FSDP_MPI_CHECK(MPI_Type_commit(&r.type), "world", -1, 0);
    FSDP_MPI_CHECK(MPI_Op_create(&half_sum<bf16, bf16_to_float, float_to_bf16>, /*commute=*/1, &r.bf16_sum), "world",
                   -1, 0);
    FSDP_MPI_CHECK(MPI_Op_create(&half_sum<f16, f16_to_float, float_to_f16>, /*commute=*/1, &r.f16_sum), "world", -1,
                   0);
    return r;
  }();
  return v;
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::BF16:
    case DType::F16: return half_mpi().type;
    case DType::U8: return MPI_BYTE;
    default: FSDP_FAIL("no MPI datatype for {}", dtype_name(t));
  }
}

MPI_Op mpi_sum(DType t) {
  if (t == DType::BF16) return half_mpi().bf16_sum;
  if (t == DType::F16) return half_mpi().f16_sum;
  return MPI_SUM;
}

// A collective in flight: MPI's request, what the watchdog calls it (op, seq), and its
// trace span when one is recording. An all_to_all_v's int counts and displacements must
// outlive the call until it completes, so they live here (their capacity is kept: each slot
// allocates on its first all_to_all_v only).
struct MpiPending {
  MPI_Request request = MPI_REQUEST_NULL;
  Collective op = Collective::Barrier;
  uint64_t seq = 0;
  uint64_t trace_id = 0;
  std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
};

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of comm (freed in the destructor while MPI is still up).
  MpiCommunicator(MPI_Comm comm, std::string name) : comm_(comm), name_(std::move(name)) {
    FSDP_MPI_CHECK(MPI_Comm_rank(comm_, &rank_), name_.c_str(), -1, 0);
    FSDP_MPI_CHECK(MPI_Comm_size(comm_, &size_), name_.c_str(), -1, 0);
    half_mpi();
    world_ranks_ = translate_world_ranks();
    watch_id_ = detail::watch_group(name_, world_ranks_);
    for (int op = 0; op < detail::kCollectiveKinds; ++op)
      wait_names_[size_t(op)] = fmt::format("wait {} (group '{}')", detail::collective_name(Collective(op)), name_);
  }

  ~MpiCommunicator() override {
    detail::forget_group(watch_id_);
    int finalized = 1;
    MPI_Finalized(&finalized);
    // Pending collectives cannot be cancelled; MPI completes them before freeing the
    // communicator. After MPI_Finalize there is nothing left to free.
    if (!finalized) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }
  MPI_Comm comm() const { return comm_; }

  Request all_gather(const Tensor& shard, const Tensor& full) override {
    const bool in_place = detail::check_all_gather(*this, shard, full);
    detail::check_device(*this, Collective::AllGather, shard, Device::cpu(), "MPI");
    const int n = count("all_gather", shard);
    const MPI_Datatype t = mpi_type(shard.dtype());
    const int slot = slots_.acquire(*this);
    FSDP_MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : shard.data_ptr(), n, t, full.data_ptr(), n, t, comm_,
                                  &slots_[slot].handle.request),
                   name_.c_str(), rank_, size_);
    return issued(slot, Collective::AllGather, 0, shard);
  }

  Request reduce_scatter(const Tensor& full, const Tensor& shard) override {
    detail::check_reduce_scatter(*this, full, shard);
    detail::check_device(*this, Collective::ReduceScatter, shard, Device::cpu(), "MPI");
    const int n = count("reduce_scatter", shard);
    const int slot = slots_.acquire(*this);
    FSDP_MPI_CHECK(MPI_Ireduce_scatter_block(full.data_ptr(), shard.data_ptr(), n, mpi_type(shard.dtype()),
                                             mpi_sum(shard.dtype()), comm_, &slots_[slot].handle.request),
                   name_.c_str(), rank_, size_);
    return issued(slot, Collective::ReduceScatter, 0, shard);
  }

  Request all_reduce(const Tensor& x) override {
    detail::check_all_reduce(*this, x);
    detail::check_device(*this, Collective::AllReduce, x, Device::cpu(), "MPI");
    const int n = count("all_reduce", x);
    const int slot = slots_.acquire(*this);
    FSDP_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, x.data_ptr(), n, mpi_type(x.dtype()), mpi_sum(x.dtype()), comm_,
                                  &slots_[slot].handle.request),
                   name_.c_str(), rank_, size_);
    return issued(slot, Collective::AllReduce, 0, x);
  }

  Request broadcast(const Tensor& x, int root) override {
    detail::check_broadcast(*this, x, root);
    detail::check_device(*this, Collective::Broadcast, x, Device::cpu(), "MPI");
    const int n = count("broadcast", x);
    const int slot = slots_.acquire(*this);
    FSDP_MPI_CHECK(MPI_Ibcast(x.data_ptr(), n, mpi_type(x.dtype()), root, comm_, &slots_[slot].handle.request),
                   name_.c_str(), rank_, size_);
    return issued(slot, Collective::Broadcast, root, x);
  }

  Request all_to_all_v(const Tensor& send, const std::vector<int64_t>& send_counts, const Tensor& recv,
                       const std::vector<int64_t>& recv_counts) override {
    detail::check_all_to_all_v(*this, send, send_counts, recv, recv_counts);
    detail::check_device(*this, Collective::AllToAllV, send, Device::cpu(), "MPI");
    count("all_to_all_v", send);
    count("all_to_all_v", recv);
    const int slot = slots_.acquire(*this);
    MpiPending& p = slots_[slot].handle;
    to_int_runs(send_counts, p.send_counts, p.send_displs);
    to_int_runs(recv_counts, p.recv_counts, p.recv_displs);
    const MPI_Datatype t = mpi_type(send.dtype());
    FSDP_MPI_CHECK(MPI_Ialltoallv(send.data_ptr(), p.send_counts.data(), p.send_displs.data(), t, recv.data_ptr(),
                                  p.recv_counts.data(), p.recv_displs.data(), t, comm_, &p.request),
                   name_.c_str(), rank_, size_);
    return issued(slot, Collective::AllToAllV, 0, send,
                  detail::all_to_all_v_bytes(rank_, send_counts, size_t(dtype_size(send.dtype()))));
  }

  void barrier() override {
    MpiPending p;
    p.seq = detail::count_collective(watch_id_);
    FSDP_MPI_CHECK(MPI_Ibarrier(comm_, &p.request), name_.c_str(), rank_, size_);
    complete(p);
  }

  void wait(Request r) override {
    if (r.id == -1) return;
    // The slot is released even if the wait fails: the request is gone either way.
    MpiPending& p = slots_.take(*this, r).handle;
    const auto t0 = std::chrono::steady_clock::now();
    {
      const trace::Span span(wait_names_[size_t(p.op)], "wait");
      complete(p);
    }
    stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (p.trace_id != 0) trace::async_end(p.trace_id, detail::collective_name(p.op), "collective");
    p.trace_id = 0;
  }

 private:
  // MPI counts are int in MPI 3.1 (OpenMPI 4.1 has no large-count variants).
  int count(const char* op, const Tensor& t) const {
    FSDP_CHECK(t.numel() <= INT_MAX,
               "{} on group '{}' (rank {} of {}): {} has {} elements per rank, more than MPI's int count limit {}; "
               "split the unit",
               op, name_, rank_, size_, t.str(), t.numel(), INT_MAX);
    return int(t.numel());
  }

  // counts (checked to sum to at most INT_MAX) as MPI's int counts and their displacements.
  static void to_int_runs(const std::vector<int64_t>& counts, std::vector<int>& out, std::vector<int>& displs) {
    out.assign(counts.begin(), counts.end());
    displs.resize(counts.size());
    int at = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      displs[i] = at;
      at += out[i];
    }
  }

  Request issued(int slot, Collective op, int root, const Tensor& t) {
    return issued(slot, op, root, t, detail::ring_bytes(op, size_, rank_, root, t.nbytes()));
  }
  Request issued(int slot, Collective op, int root, const Tensor& t, uint64_t bytes) {
    ++stats_.calls;
    stats_.bytes_sent += bytes;
    MpiPending& p = slots_[slot].handle;
    p.op = op;
    p.seq = detail::count_collective(watch_id_);
    p.trace_id = 0;
    if (trace::enabled()) {
      p.trace_id = trace::async_begin(detail::collective_name(op), "collective",
                                      detail::collective_trace_args(*this, op, t, bytes, root));
      trace::add_bytes_sent(bytes);
    }
    return slots_.issue(slot);
  }

  // Until p's request has completed: MPI_Wait, or polled under the watchdog's deadline. A
  // failed MPI call is the watchdog's too (a dead peer's connection), then thrown as before.
  void complete(MpiPending& p) {
    if (!detail::watchdog_armed()) {
      FSDP_MPI_CHECK(MPI_Wait(&p.request, MPI_STATUS_IGNORE), name_.c_str(), rank_, size_);
      return;
    }
    detail::watched_wait(watch_id_, p.op, p.seq, [&] {
      int flag = 0;
      const int rc = MPI_Test(&p.request, &flag, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) [[unlikely]] {
        detail::watched_failure(watch_id_, p.op, p.seq, fmt::format("MPI_Test: {}", detail::mpi_error_string(rc)));
        FSDP_MPI_CHECK(rc, name_.c_str(), rank_, size_);
      }
      return flag != 0;
    });
  }

  // This group's members as ranks of MPI_COMM_WORLD, in group-rank order.
  std::vector<int> translate_world_ranks() const {
    MPI_Group mine = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
    std::vector<int> ours(static_cast<size_t>(size_)), theirs(static_cast<size_t>(size_), -1);
    for (int i = 0; i < size_; ++i) ours[size_t(i)] = i;
    FSDP_MPI_CHECK(MPI_Comm_group(comm_, &mine), name_.c_str(), rank_, size_);
    FSDP_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world), name_.c_str(), rank_, size_);
    FSDP_MPI_CHECK(MPI_Group_translate_ranks(mine, size_, ours.data(), world, theirs.data()), name_.c_str(), rank_,
                   size_);
    MPI_Group_free(&mine);
    MPI_Group_free(&world);
    return theirs;
  }

  MPI_Comm comm_;
  std::string name_;
  int rank_ = 0, size_ = 1;
  int watch_id_ = -1;
  detail::RequestSlots<MpiPending> slots_;
  std::array<std::string, detail::kCollectiveKinds> wait_names_;  // made once, a name per Collective: a span per wait must not format
};

}  // namespace

namespace detail {
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, std::string name) {
  return std::make_unique<MpiCommunicator>(comm, std::move(name));
}

MPI_Comm mpi_comm_of(const Communicator& c) {
  const auto* m = dynamic_cast<const MpiCommunicator*>(&c);
  return m != nullptr ? m->comm() : MPI_COMM_NULL;
}
}  // namespace detail

}  // namespace fsdp::dist
