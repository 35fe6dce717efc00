// The single-rank communicator, used when the process was started without a launcher:
// a laptop or CI run needs no mpirun and never initialises MPI. With one rank every
// collective is the identity, so all_gather / reduce_scatter copy their input to their
// output (nothing at all when the shard already is the full buffer) and all_reduce /
// broadcast do nothing. Requests complete at once (id -1); no byte is ever sent.
//
// This file also defines what every backend shares (declared in detail.h): the argument
// checks, so that bad input gives the same message on every backend, and the
// ring-algorithm byte formulas of communicator.h.
#include <cstring>
#include <memory>
#include <string>

#include "detail.h"
#include "fsdp/core/error.h"
#include "fsdp/dist/communicator.h"
#include "fsdp/ops/elementwise.h"

namespace fsdp::dist::detail {

const char* collective_name(Collective op) {
  switch (op) {
    case Collective::AllGather: return "all_gather";
    case Collective::ReduceScatter: return "reduce_scatter";
    case Collective::AllReduce: return "all_reduce";
    case Collective::Broadcast: return "broadcast";
    case Collective::AllToAllV: return "all_to_all_v";
    case Collective::Barrier: return "barrier";
  }
  return "?";
}

namespace {

// "all_gather on group 'shard' (rank 1 of 2)": the prefix of every argument error.
std::string where(const Communicator& c, Collective op) {
  return fmt::format("{} on group '{}' (rank {} of {})", collective_name(op), c.name(), c.rank(), c.size());
}

void check_tensor(const Communicator& c, Collective op, const Tensor& t, const char* what) {
  FSDP_CHECK(t.defined(), "{}: {} is an undefined tensor", where(c, op), what);
  FSDP_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::F64 || t.dtype() == DType::BF16 || t.dtype() == DType::F16 ||
                 t.dtype() == DType::U8,
             "{}: {} is {}; collectives take float32, float64, bfloat16, float16 or uint8", where(c, op), what, t.str());
  // Bytes (a frozen unit's NF4 codes) are moved, never summed.
  FSDP_CHECK(t.dtype() != DType::U8 || op == Collective::AllGather || op == Collective::Broadcast,
             "{}: {} is {}; uint8 tensors can be all-gathered or broadcast, not summed", where(c, op), what, t.str());
  FSDP_CHECK(t.is_contiguous(), "{}: {} must be contiguous, got {} with strides {}", where(c, op), what, t.str(),
             t.strides().str());
}

bool overlaps(const Tensor& a, const Tensor& b) {
  if (a.nbytes() == 0 || b.nbytes() == 0) return false;
  const auto* pa = static_cast<const char*>(a.data_ptr());
  const auto* pb = static_cast<const char*>(b.data_ptr());
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

// all_gather / reduce_scatter: `small` has n elements, `big` n * size.
bool check_pair(const Communicator& c, Collective op, const Tensor& small, const char* small_name, const Tensor& big,
                const char* big_name) {
  check_tensor(c, op, small, small_name);
  check_tensor(c, op, big, big_name);
  FSDP_CHECK(small.dtype() == big.dtype(), "{}: {} is {} but {} is {}; both must have the same dtype", where(c, op),
             small_name, small.str(), big_name, big.str());
  FSDP_CHECK(small.device() == big.device(), "{}: {} is {} but {} is {}; both must be on the same device",
             where(c, op), small_name, small.str(), big_name, big.str());
  FSDP_CHECK(big.numel() == small.numel() * c.size(),
             "{}: {} has {} elements but must have {}.numel() * group size = {} * {} = {}", where(c, op), big_name,
             big.numel(), small_name, small.numel(), c.size(), small.numel() * c.size());
  if (!overlaps(small, big)) return false;
  // The one overlap allowed: all_gather whose shard is this rank's slot of full.
  const bool in_place = op == Collective::AllGather &&
                        small.data_ptr() == static_cast<char*>(big.data_ptr()) + c.rank() * small.nbytes();
  FSDP_CHECK(in_place, "{}: {} and {} overlap in memory{}", where(c, op), small_name, big_name,
             op == Collective::AllGather ? " (only a shard that is exactly this rank's slot of full may)" : "");
  return true;
}

}  // namespace

bool check_all_gather(const Communicator& c, const Tensor& shard, const Tensor& full) {
  return check_pair(c, Collective::AllGather, shard, "shard", full, "full");
}

void check_reduce_scatter(const Communicator& c, const Tensor& full, const Tensor& shard) {
  check_pair(c, Collective::ReduceScatter, shard, "shard", full, "full");
}

void check_all_reduce(const Communicator& c, const Tensor& x) { check_tensor(c, Collective::AllReduce, x, "x"); }

void check_broadcast(const Communicator& c, const Tensor& x, int root) {
  check_tensor(c, Collective::Broadcast, x, "x");
  FSDP_CHECK(root >= 0 && root < c.size(), "{}: root {} is not a rank of the group (0 .. {})",
             where(c, Collective::Broadcast), root, c.size() - 1);
}

void check_all_to_all_v(const Communicator& c, const Tensor& send, const std::vector<int64_t>& send_counts,
                        const Tensor& recv, const std::vector<int64_t>& recv_counts) {
  constexpr Collective op = Collective::AllToAllV;
  check_tensor(c, op, send, "send");
  check_tensor(c, op, recv, "recv");
  FSDP_CHECK(send.dtype() == recv.dtype(), "{}: send is {} but recv is {}; both must have the same dtype", where(c, op),
             send.str(), recv.str());
  FSDP_CHECK(send.device() == recv.device(), "{}: send is {} but recv is {}; both must be on the same device",
             where(c, op), send.str(), recv.str());
  FSDP_CHECK(!overlaps(send, recv), "{}: send and recv overlap in memory", where(c, op));
  const auto check_counts = [&](const std::vector<int64_t>& counts, const Tensor& t, const char* what) {
    FSDP_CHECK(counts.size() == size_t(c.size()), "{}: {}_counts has {} entries, one per group rank ({}) expected",
               where(c, op), what, counts.size(), c.size());
    int64_t total = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      FSDP_CHECK(counts[i] >= 0, "{}: {}_counts[{}] is {}", where(c, op), what, i, counts[i]);
      total += counts[i];
    }
    FSDP_CHECK(total == t.numel(), "{}: {}_counts sum to {} elements but {} is {}", where(c, op), what, total, what,
               t.str());
  };
  check_counts(send_counts, send, "send");
  check_counts(recv_counts, recv, "recv");
  // The one pair of counts a rank can check alone: its run to itself.
  const size_t me = size_t(c.rank());
  FSDP_CHECK(send_counts[me] == recv_counts[me], "{}: sends {} elements to itself but expects {}", where(c, op),
             send_counts[me], recv_counts[me]);
}

void check_device(const Communicator& c, Collective op, const Tensor& t, Device expected, const char* backend) {
  FSDP_CHECK(t.device() == expected, "{}: the {} communicator serves tensors on {}, got {}", where(c, op), backend,
             expected.str(), t.str());
}

// For broadcast the ring starts at the root, so the rank just before the root (the last
// one) sends nothing.
uint64_t ring_bytes(Collective op, int size, int rank, int root, uint64_t nbytes) {
  if (size <= 1) return 0;
  const auto n = uint64_t(size);
  switch (op) {
    case Collective::AllGather:
    case Collective::ReduceScatter: return (n - 1) * nbytes;
    case Collective::AllReduce: return 2 * (n - 1) * nbytes / n;
    case Collective::Broadcast: return (rank - root + size) % size == size - 1 ? 0 : nbytes;
    case Collective::AllToAllV:  // not a ring: all_to_all_v_bytes
    case Collective::Barrier: return 0;
  }
  return 0;
}

uint64_t all_to_all_v_bytes(int rank, const std::vector<int64_t>& send_counts, size_t element_size) {
  uint64_t elements = 0;
  for (size_t j = 0; j < send_counts.size(); ++j)
    if (int(j) != rank) elements += uint64_t(send_counts[j]);
  return elements * element_size;
}

[[noreturn]] void fail_unknown_request(const Communicator& c, Request r) {
  FSDP_FAIL("wait on group '{}' (rank {} of {}): request {} is not pending (already waited, or never issued by this "
            "communicator)",
            c.name(), c.rank(), c.size(), r.id);
}

[[noreturn]] void fail_too_many_pending(const Communicator& c, int cuda_device, int max_pending) {
  FSDP_FAIL("group '{}' (rank {} of {}{}): {} collectives are already pending; wait() some before issuing more",
            c.name(), c.rank(), c.size(), cuda_device >= 0 ? fmt::format(", cuda:{}", cuda_device) : std::string(),
            max_pending);
}

}  // namespace fsdp::dist::detail

namespace fsdp::dist {
namespace {

using detail::Collective;

// Copies src to dst (same dtype and numel, contiguous). Host memory directly; device
// memory through the op set's cast, which for equal dtypes is the device's copy.
void copy_flat(const Tensor& src, const Tensor& dst) {
  if (src.nbytes() == 0) return;
  if (src.device().is_cpu()) {
    std::memcpy(dst.data_ptr(), src.data_ptr(), src.nbytes());
  } else {
    cast(src.reshape({src.numel()}), dst.reshape({dst.numel()}));
  }
}

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::string name, int world_rank) : name_(std::move(name)) { world_ranks_ = {world_rank}; }

  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return name_; }

  Request all_gather(const Tensor& shard, const Tensor& full) override {
    if (!detail::check_all_gather(*this, shard, full)) copy_flat(shard, full);
    ++stats_.calls;
    return {};
  }
  Request reduce_scatter(const Tensor& full, const Tensor& shard) override {
    detail::check_reduce_scatter(*this, full, shard);
    copy_flat(full, shard);
    ++stats_.calls;
    return {};
  }
  Request all_reduce(const Tensor& x) override {
    detail::check_all_reduce(*this, x);
    ++stats_.calls;
    return {};
  }
  Request broadcast(const Tensor& x, int root) override {
    detail::check_broadcast(*this, x, root);
    ++stats_.calls;
    return {};
  }
  Request all_to_all_v(const Tensor& send, const std::vector<int64_t>& send_counts, const Tensor& recv,
                       const std::vector<int64_t>& recv_counts) override {
    detail::check_all_to_all_v(*this, send, send_counts, recv, recv_counts);
    copy_flat(send, recv);
    ++stats_.calls;
    return {};
  }
  void barrier() override {}
  void wait(Request r) override {
    if (r.id != -1) detail::fail_unknown_request(*this, r);
  }

 private:
  std::string name_;
};

}  // namespace

namespace detail {
std::unique_ptr<Communicator> make_local_communicator(std::string name, int world_rank) {
  return std::make_unique<LocalCommunicator>(std::move(name), world_rank);
}
}  // namespace detail

Request Communicator::all_to_all_v(const Tensor&, const std::vector<int64_t>&, const Tensor&,
                                   const std::vector<int64_t>&) {
  throw Error(fmt::format("all_to_all_v is not implemented for the communicator of group '{}' ({}) yet", name(),
                          describe_world_ranks(world_ranks())));
}

std::string describe_world_ranks(const std::vector<int>& ranks) {
  if (ranks.empty()) return "no ranks";
  if (ranks.size() == 1) return fmt::format("world rank {}", ranks[0]);
  bool contiguous = true;
  for (size_t i = 1; i < ranks.size(); ++i) contiguous = contiguous && ranks[i] == ranks[i - 1] + 1;
  if (contiguous) return fmt::format("world ranks {}-{}", ranks.front(), ranks.back());
  std::string s = "world ranks ";
  for (size_t i = 0; i < ranks.size() && i < 8; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 8) s += fmt::format(", ... ({} ranks)", ranks.size());
  return s;
}

}  // namespace fsdp::dist
