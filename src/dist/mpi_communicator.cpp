// The MPI communicator: collectives on host tensors over one MPI_Comm (OpenMPI 4.1).
//
// Every call is an MPI non-blocking collective (MPI_Iallgather, MPI_Ireduce_scatter_block,
// MPI_Iallreduce, MPI_Ibcast) whose MPI_Request lives in a detail::RequestSlots table
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
// Progress: OpenMPI 4.1 progresses non-blocking collectives only inside MPI calls, so on
// the CPU backend a collective mostly runs inside wait(); issuing early still lets
// small collectives finish eagerly and keeps the engine's code the same as with NCCL.
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>

#include "detail.h"
#include "fsdp/dist/communicator.h"

namespace fsdp::dist::detail {

[[noreturn]] void mpi_fail(int rc, const char* call, const char* group, int group_rank, int group_size,
                           const char* file, int line) {
  char err[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, err, &len) != MPI_SUCCESS) fmt::format_to_n(err, sizeof(err) - 1, "MPI error {}", rc);
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

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of comm (freed in the destructor while MPI is still up).
  MpiCommunicator(MPI_Comm comm, std::string name) : comm_(comm), name_(std::move(name)) {
    FSDP_MPI_CHECK(MPI_Comm_rank(comm_, &rank_), name_.c_str(), -1, 0);
    FSDP_MPI_CHECK(MPI_Comm_size(comm_, &size_), name_.c_str(), -1, 0);
    half_mpi();
  }

  ~MpiCommunicator() override {
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
                                  &slots_[slot].handle),
                   name_.c_str(), rank_, size_);
    return issued(slot, Collective::AllGather, 0, shard.nbytes());
  }

  Request reduce_scatter(const Tensor& full, const Tensor& shard) override {
    detail::check_reduce_scatter(*this, full, shard);
    detail::check_device(*this, Collective::ReduceScatter, shard, Device::cpu(), "MPI");
    const int n = count("reduce_scatter", shard);
    const int slot = slots_.acquire(*this);
    FSDP_MPI_CHECK(MPI_Ireduce_scatter_block(full.data_ptr(), shard.data_ptr(), n, mpi_type(shard.dtype()),
                                             mpi_sum(shard.dtype()), comm_, &slots_[slot].handle),
                   name_.c_str(), rank_, size_);
    return issued(slot, Collective::ReduceScatter, 0, shard.nbytes());
  }

  Request all_reduce(const Tensor& x) override {
    detail::check_all_reduce(*this, x);
    detail::check_device(*this, Collective::AllReduce, x, Device::cpu(), "MPI");
    const int n = count("all_reduce", x);
    const int slot = slots_.acquire(*this);
    FSDP_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, x.data_ptr(), n, mpi_type(x.dtype()), mpi_sum(x.dtype()), comm_,
                                  &slots_[slot].handle),
                   name_.c_str(), rank_, size_);
    return issued(slot, Collective::AllReduce, 0, x.nbytes());
  }

  Request broadcast(const Tensor& x, int root) override {
    detail::check_broadcast(*this, x, root);
    detail::check_device(*this, Collective::Broadcast, x, Device::cpu(), "MPI");
    const int n = count("broadcast", x);
    const int slot = slots_.acquire(*this);
    FSDP_MPI_CHECK(MPI_Ibcast(x.data_ptr(), n, mpi_type(x.dtype()), root, comm_, &slots_[slot].handle),
                   name_.c_str(), rank_, size_);
    return issued(slot, Collective::Broadcast, root, x.nbytes());
  }

  void barrier() override { FSDP_MPI_CHECK(MPI_Barrier(comm_), name_.c_str(), rank_, size_); }

  void wait(Request r) override {
    if (r.id == -1) return;
    // The slot is released even if MPI_Wait fails: the request is gone either way.
    MPI_Request& req = slots_.take(*this, r).handle;
    const auto t0 = std::chrono::steady_clock::now();
    FSDP_MPI_CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE), name_.c_str(), rank_, size_);
    stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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

  Request issued(int slot, Collective op, int root, uint64_t nbytes) {
    ++stats_.calls;
    stats_.bytes_sent += detail::ring_bytes(op, size_, rank_, root, nbytes);
    return slots_.issue(slot);
  }

  MPI_Comm comm_;
  std::string name_;
  int rank_ = 0, size_ = 1;
  detail::RequestSlots<MPI_Request> slots_;
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
