// The store communicator: the collectives of communicator.h on host tensors, over the TCP
// store's gathers (fsdp/dist/tcp_store.h), for the host groups of a GPU job launched without
// MPI. They carry little: the step's loss sums and votes, the start-up config check, a
// checkpoint's status words, and NCCL's unique id for each device group; the FSDP engine's
// tensors go through NCCL.
//
// Every collective is one gather: each member sends what it holds and receives every member's
// bytes in group-rank order, then computes its result locally, the same way on every member:
// all_gather concatenates; all_reduce and reduce_scatter add the members' buffers in group-rank
// order (float16 / bfloat16 in float32, rounded once per addition, as communicator.h promises),
// so every member gets the same bits; broadcast takes the root's. The gather's key names the
// group (name, registration index, first member) and the collective's sequence number on it,
// so gathers of different groups or steps never meet.
//
// Non-blocking as communicator.h asks: a call sends its bytes and returns; wait() waits for the
// answer under the collective watchdog (fsdp/dist/watchdog.h), polling every millisecond.
#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>

#include "detail.h"
#include "fsdp/core/trace.h"
#include "fsdp/dist/tcp_store.h"
#include "fsdp/dist/watchdog.h"

namespace fsdp::dist {
namespace {

using detail::Collective;

struct StorePending {
  uint64_t ticket = 0;
  Collective op = Collective::Barrier;
  uint64_t seq = 0;
  Tensor out;   // where the result goes (full, shard, or x)
  int root = 0;
};

std::string bytes_of(const Tensor& t) {
  return std::string(static_cast<const char*>(t.data_ptr()), size_t(t.nbytes()));
}

// dst[i] += src[i] over n elements of t, in the dtype's promised arithmetic.
void add_into(DType t, void* dst, const void* src, int64_t n) {
  switch (t) {
    case DType::F32: {
      auto* d = static_cast<float*>(dst);
      const auto* s = static_cast<const float*>(src);
      for (int64_t i = 0; i < n; ++i) d[i] += s[i];
      return;
    }
    case DType::F64: {
      auto* d = static_cast<double*>(dst);
      const auto* s = static_cast<const double*>(src);
      for (int64_t i = 0; i < n; ++i) d[i] += s[i];
      return;
    }
    case DType::BF16: {
      auto* d = static_cast<bf16*>(dst);
      const auto* s = static_cast<const bf16*>(src);
      for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(bf16_to_float(d[i]) + bf16_to_float(s[i]));
      return;
    }
    case DType::F16: {
      auto* d = static_cast<f16*>(dst);
      const auto* s = static_cast<const f16*>(src);
      for (int64_t i = 0; i < n; ++i) d[i] = float_to_f16(f16_to_float(d[i]) + f16_to_float(s[i]));
      return;
    }
    default: FSDP_FAIL("no sum for {}", dtype_name(t));
  }
}

class StoreCommunicator final : public Communicator {
 public:
  StoreCommunicator(std::shared_ptr<TcpStoreClient> client, std::string name, std::vector<int> members, int index)
      : client_(std::move(client)), name_(std::move(name)) {
    world_ranks_ = std::move(members);
    const int me = client_->identity().rank;
    for (size_t k = 0; k < world_ranks_.size(); ++k)
      if (world_ranks_[k] == me) rank_ = int(k);
    FSDP_CHECK(rank_ >= 0, "store communicator '{}': world rank {} is not among its members ({})", name_, me,
               describe_world_ranks(world_ranks_));
    key_ = fmt::format("{}#{}@{}/", name_, index, world_ranks_.front());
    watch_id_ = detail::watch_group(name_, world_ranks_);
    for (int op = 0; op < detail::kCollectiveKinds; ++op)
      wait_names_[size_t(op)] = fmt::format("wait {} (group '{}')", detail::collective_name(Collective(op)), name_);
  }

  ~StoreCommunicator() override { detail::forget_group(watch_id_); }

  int rank() const override { return rank_; }
  int size() const override { return int(world_ranks_.size()); }
  std::string name() const override { return name_; }
  const std::shared_ptr<TcpStoreClient>& client() const { return client_; }

  Request all_gather(const Tensor& shard, const Tensor& full) override {
    detail::check_all_gather(*this, shard, full);
    detail::check_device(*this, Collective::AllGather, shard, Device::cpu(), "the TCP store");
    return issue(Collective::AllGather, bytes_of(shard), full, 0, shard);
  }

  Request reduce_scatter(const Tensor& full, const Tensor& shard) override {
    detail::check_reduce_scatter(*this, full, shard);
    detail::check_device(*this, Collective::ReduceScatter, shard, Device::cpu(), "the TCP store");
    return issue(Collective::ReduceScatter, bytes_of(full), shard, 0, shard);
  }

  Request all_reduce(const Tensor& x) override {
    detail::check_all_reduce(*this, x);
    detail::check_device(*this, Collective::AllReduce, x, Device::cpu(), "the TCP store");
    return issue(Collective::AllReduce, bytes_of(x), x, 0, x);
  }

  Request broadcast(const Tensor& x, int root) override {
    detail::check_broadcast(*this, x, root);
    detail::check_device(*this, Collective::Broadcast, x, Device::cpu(), "the TCP store");
    return issue(Collective::Broadcast, rank_ == root ? bytes_of(x) : std::string(), x, root, x);
  }

  void barrier() override {
    StorePending p;
    p.op = Collective::Barrier;
    p.seq = detail::count_collective(watch_id_);
    p.ticket = client_->gather(key_ + std::to_string(p.seq), size(), rank_, {});
    complete(p);
  }

  void wait(Request r) override {
    if (r.id == -1) return;
    StorePending p = slots_.take(*this, r).handle;
    const auto t0 = std::chrono::steady_clock::now();
    {
      const trace::Span span(wait_names_[size_t(p.op)], "wait");
      complete(p);
    }
    stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

 private:
  Request issue(Collective op, std::string bytes, const Tensor& out, int root, const Tensor& counted) {
    const int slot = slots_.acquire(*this);
    StorePending& p = slots_[slot].handle;
    p.op = op;
    p.seq = detail::count_collective(watch_id_);
    p.out = out;
    p.root = root;
    p.ticket = client_->gather(key_ + std::to_string(p.seq), size(), rank_, std::move(bytes));
    const uint64_t sent = detail::ring_bytes(op, size(), rank_, root, counted.nbytes());
    ++stats_.calls;
    stats_.bytes_sent += sent;
    if (trace::enabled()) trace::add_bytes_sent(sent);
    return slots_.issue(slot);
  }

  // Waits for p's gather under the watchdog and writes its result.
  void complete(StorePending& p) {
    detail::watched_wait(watch_id_, p.op, p.seq,
                         [&] { return client_->ready(p.ticket, std::chrono::milliseconds(1)); });
    const std::vector<std::string> parts = client_->take(p.ticket);
    FSDP_CHECK(int(parts.size()) == size(), "store communicator '{}': a gather answered {} of {} members", name_,
               parts.size(), size());
    if (p.op == Collective::Barrier) return;
    const Tensor& out = p.out;
    auto* dst = static_cast<char*>(out.data_ptr());
    const size_t nbytes = size_t(out.nbytes());
    switch (p.op) {
      case Collective::AllGather: {
        const size_t each = nbytes / size_t(size());
        for (int r = 0; r < size(); ++r) {
          FSDP_CHECK(parts[size_t(r)].size() == each, "store communicator '{}': all_gather got {} bytes from member "
                     "{}, expected {}", name_, parts[size_t(r)].size(), r, each);
          std::memcpy(dst + size_t(r) * each, parts[size_t(r)].data(), each);
        }
        return;
      }
      case Collective::AllReduce:
      case Collective::ReduceScatter: {
        // Member r's contribution to this rank's result: all of x, or block `rank_` of full.
        const size_t offset = p.op == Collective::AllReduce ? 0 : size_t(rank_) * nbytes;
        for (int r = 0; r < size(); ++r)
          FSDP_CHECK(parts[size_t(r)].size() >= offset + nbytes, "store communicator '{}': {} got {} bytes from "
                     "member {}, expected {}", name_, detail::collective_name(p.op), parts[size_t(r)].size(), r,
                     offset + nbytes);
        std::memcpy(dst, parts[0].data() + offset, nbytes);
        for (int r = 1; r < size(); ++r) add_into(out.dtype(), dst, parts[size_t(r)].data() + offset, out.numel());
        return;
      }
      case Collective::Broadcast:
        FSDP_CHECK(parts[size_t(p.root)].size() == nbytes, "store communicator '{}': broadcast got {} bytes from the "
                   "root {}, expected {}", name_, parts[size_t(p.root)].size(), p.root, nbytes);
        if (rank_ != p.root) std::memcpy(dst, parts[size_t(p.root)].data(), nbytes);
        return;
      case Collective::AllToAllV:  // never issued: this backend keeps the base class's refusal
      case Collective::Barrier: return;
    }
  }

  std::shared_ptr<TcpStoreClient> client_;
  std::string name_;
  int rank_ = -1;
  std::string key_;
  int watch_id_ = -1;
  detail::RequestSlots<StorePending> slots_;
  std::array<std::string, detail::kCollectiveKinds> wait_names_;
};

int& next_index() {
  static int n = 0;  // made collectively in program order: the same on every member
  return n;
}

}  // namespace

namespace detail {

std::unique_ptr<Communicator> make_store_communicator(std::shared_ptr<TcpStoreClient> client, std::string name,
                                                      std::vector<int> world_ranks, int instance) {
  const int index = next_index()++;
  return std::make_unique<StoreCommunicator>(std::move(client), std::move(name), std::move(world_ranks),
                                             instance >= 0 ? instance : index);
}

std::shared_ptr<TcpStoreClient> store_client_of(const Communicator& c) {
  const auto* s = dynamic_cast<const StoreCommunicator*>(&c);
  return s != nullptr ? s->client() : nullptr;
}

}  // namespace detail
}  // namespace fsdp::dist
