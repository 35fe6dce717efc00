// Private to src/dist: what the communicator backends (local, MPI, NCCL) and the
// bootstrap share. The argument checks live in one place so that bad input gives the same
// message on every backend; the ring byte formulas are those of communicator.h.
#pragma once

#include <mpi.h>

#include <array>
#include <functional>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fsdp/dist/communicator.h"
#include "fsdp/dist/rendezvous.h"
#include "fsdp/dist/tcp_store.h"

namespace fsdp::dist::detail {

// Barrier last: the NCCL communicator names its ranges by the others. The values are array
// indices (wait and range names made once per group) and travel in watchdog messages.
enum class Collective { AllGather, ReduceScatter, AllReduce, Broadcast, AllToAllV, Barrier };
inline constexpr int kCollectiveKinds = 6;
const char* collective_name(Collective op);  // "all_gather", ..., "barrier" (local_communicator.cpp)

// ---- argument checks (local_communicator.cpp) ----

// Returns true for an in-place all_gather (shard is full's slot for this rank).
bool check_all_gather(const Communicator& c, const Tensor& shard, const Tensor& full);
void check_reduce_scatter(const Communicator& c, const Tensor& full, const Tensor& shard);
void check_all_reduce(const Communicator& c, const Tensor& x);
void check_broadcast(const Communicator& c, const Tensor& x, int root);
// Counts: one per group rank, non-negative, summing to send's / recv's numel; this rank's
// run to itself the same length on both sides.
void check_all_to_all_v(const Communicator& c, const Tensor& send, const std::vector<int64_t>& send_counts,
                        const Tensor& recv, const std::vector<int64_t>& recv_counts);
// The backend serves tensors on `expected` only (MPI: the host; NCCL: its own GPU).
void check_device(const Communicator& c, Collective op, const Tensor& t, Device expected, const char* backend);

// Bytes this rank sends under the ring algorithm (see communicator.h); not all_to_all_v's.
uint64_t ring_bytes(Collective op, int size, int rank, int root, uint64_t nbytes);
// all_to_all_v's: the runs sent to the other ranks (this rank's own run is a local copy).
uint64_t all_to_all_v_bytes(int rank, const std::vector<int64_t>& send_counts, size_t element_size);

// ---- trace (collective_trace.cpp; fsdp/core/trace.h) ----

// A collective's trace args: group, ranks, the bytes this rank sends (what stats() counts),
// elements and dtype of the tensor named in communicator.h's formulas, root for a broadcast.
std::string collective_trace_args(const Communicator& c, Collective op, const Tensor& t, uint64_t bytes_sent,
                                  int root);

// The message for wait() on an id the communicator does not hold.
[[noreturn]] void fail_unknown_request(const Communicator& c, Request r);
// The message for a collective issued while `max_pending` are already in flight;
// cuda_device < 0 for a host backend.
[[noreturn]] void fail_too_many_pending(const Communicator& c, int cuda_device, int max_pending);

// The pending requests of an asynchronous backend (MPI, NCCL): a fixed table of
// kMaxPending slots, so issuing and completing collectives never allocates. A Request id
// is (generation << kSlotBits | slot): waiting twice, or on an id from another
// communicator, finds a slot whose generation moved on (or is free) and throws instead of
// waiting on someone else's collective. Handle is the backend's completion object
// (MPI_Request, cudaEvent_t).
template <typename Handle>
class RequestSlots {
 public:
  // 64 collectives in flight per group is far more than FSDP's prefetch depth needs; a
  // caller that exceeds it forgot to wait, which fail_too_many_pending says.
  static constexpr int kSlotBits = 6;
  static constexpr int kMaxPending = 1 << kSlotBits;

  struct Slot {
    Handle handle{};
    uint64_t generation = 0;
    bool busy = false;
  };

  // A free slot, not yet busy (its handle is filled in by the collective's call).
  int acquire(const Communicator& c, int cuda_device = -1) {
    for (int k = 0; k < kMaxPending; ++k) {
      const int s = (next_ + k) % kMaxPending;
      if (!slots_[s].busy) {
        next_ = (s + 1) % kMaxPending;
        return s;
      }
    }
    fail_too_many_pending(c, cuda_device, kMaxPending);
  }

  // Marks the slot pending and returns its request id.
  Request issue(int slot) {
    Slot& s = slots_[slot];
    s.busy = true;
    ++s.generation;
    return Request{int64_t(s.generation << kSlotBits) | slot};
  }

  // The slot of a pending request, released; throws for an unknown or finished one.
  Slot& take(const Communicator& c, Request r) {
    Slot& s = slots_[size_t(r.id & kSlotMask)];
    if (r.id < 0 || !s.busy || s.generation != uint64_t(r.id) >> kSlotBits) fail_unknown_request(c, r);
    s.busy = false;
    return s;
  }

  Slot& operator[](int slot) { return slots_[size_t(slot)]; }
  std::array<Slot, kMaxPending>& all() { return slots_; }

 private:
  static constexpr int64_t kSlotMask = kMaxPending - 1;

  std::array<Slot, kMaxPending> slots_{};
  int next_ = 0;
};

// ---- the watchdog (watchdog.cpp; the user's side is fsdp/dist/watchdog.h) ----

// A non-owning reference to a callable: the wait loop calls it without the heap allocation
// a std::function of a capturing lambda may make.
template <typename Sig>
class FunctionRef;
template <typename R, typename... A>
class FunctionRef<R(A...)> {
 public:
  template <typename F>
  FunctionRef(F&& f)  // NOLINT: implicit, like std::function
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, A... a) -> R { return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<A>(a)...); }) {}
  R operator()(A... a) const { return call_(obj_, std::forward<A>(a)...); }

 private:
  void* obj_;
  R (*call_)(void*, A...);
};

// How the watchdog's census messages travel between world ranks (Note [Watchdog census] in
// watchdog.cpp): a duplicate of MPI_COMM_WORLD (watchdog_mpi.cpp) or the TCP store's relay
// (watchdog_store.cpp). Only the main thread calls it.
class WatchdogChannel {
 public:
  virtual ~WatchdogChannel() = default;
  virtual int rank() const = 0;  // this process's world rank
  virtual void send(int to, const std::vector<int64_t>& message) = 0;
  // One message that has arrived, if any (never blocks).
  virtual bool receive(int* from, std::vector<int64_t>* message) = 0;
  virtual void progress() {}  // retires finished sends (MPI)
  // Ends the whole job with exit_code (MPI_Abort; the store's abort). Never returns.
  [[noreturn]] virtual void abort(int exit_code) = 0;
  virtual void stop() {}  // before the transport shuts down
};

// The watchdog's side channel and every world rank's host name, by world rank.
void start_watchdog(std::unique_ptr<WatchdogChannel> channel, std::vector<std::string> hosts);
// Collective over `world` (MPI up): the MPI side channel, with every rank's host name.
void start_watchdog(MPI_Comm world);
// The TCP store's relay as the side channel (watchdog_store.cpp).
std::unique_ptr<WatchdogChannel> make_store_watchdog_channel(std::shared_ptr<TcpStoreClient> client);
// Every world rank's host name, as start_watchdog was given them.
const std::vector<std::string>& world_hosts();
// Before MPI_Finalize (or the store's bye).
void stop_watchdog();
// The hooks of on_watchdog_abort, for a job ended by another path (the TCP store's abort).
void run_watchdog_abort_hooks();
// A communicator's group, by name and its members' world ranks in group-rank order; the id
// is this process's registration index, the same on every member because communicators are
// made collectively in program order. Ids stay valid (a destroyed group is only forgotten).
int watch_group(const std::string& name, std::vector<int> world_ranks);
void forget_group(int id);
// Counts a collective issued on the group; returns its 1-based sequence number.
uint64_t count_collective(int id);
// Whether waits run under a deadline (a timeout is set and the side communicator exists).
bool watchdog_armed();
// Blocks until done() returns true. Armed: polls it, answers the other ranks' questions, and
// when the deadline passes or another rank's watchdog fired, reports and aborts the job.
void watched_wait(int id, Collective op, uint64_t seq, FunctionRef<bool()> done);
// A collective the library reported failed (`what`: its words): reported and aborted like a
// timeout when armed; returns only when not armed or abort is off (the caller then throws).
void watched_failure(int id, Collective op, uint64_t seq, const std::string& what);
// One poll for a wait the watchdog does not run itself (the host waiting for a GPU stream,
// Note [Host waits]; the emulated NCCL waiting inside a call): the oldest collective still
// in flight is seq on group id (id -1: none), issued waited_s ago; failure: what the library
// reports about it (nullptr: nothing). Answers the other ranks, and when the collective is
// overdue or failed, or another rank's watchdog fired, reports and aborts as watched_wait does
// (once per collective when abort is off).
void watched_poll(int id, Collective op, uint64_t seq, double waited_s, const std::string* failure);
// Called on this rank right before MPI_Abort (the NCCL communicators abort themselves).
void on_watchdog_abort(const void* key, std::function<void()> fn);
void forget_watchdog_abort(const void* key);

// ---- factories ----

// A single-rank group; world_rank: its member's rank in the world (local_communicator.cpp).
std::unique_ptr<Communicator> make_local_communicator(std::string name, int world_rank = 0);
// Takes ownership of comm (mpi_communicator.cpp).
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, std::string name);
// The MPI_Comm behind an MPI communicator; MPI_COMM_NULL for any other backend.
MPI_Comm mpi_comm_of(const Communicator& c);
// A host group over the TCP store's gathers, of these world ranks in group-rank order
// (store_communicator.cpp); made collectively by its members, in the same order everywhere.
// instance tells apart live groups of one name and members: by default the process's count
// of store groups made so far (the same on every member); tests of several ranks in one
// process give it.
std::unique_ptr<Communicator> make_store_communicator(std::shared_ptr<TcpStoreClient> client, std::string name,
                                                      std::vector<int> world_ranks, int instance = -1);
// The store client behind a store communicator; nullptr for any other backend.
std::shared_ptr<TcpStoreClient> store_client_of(const Communicator& c);

// ---- the bootstrap (bootstrap.cpp, store_bootstrap.cpp) ----

// The world of a launch without MPI (fsdp/dist/rendezvous.h): rank 0 hosts the TCP store,
// every rank joins it, and the world is a store communicator (shard and replicate come from
// split_store_process_groups); its world_info.node_of_rank comes from the ranks' host names.
ProcessGroups init_store_world_groups(const Rendezvous& rendezvous);
// split_process_groups over a store world.
ProcessGroups split_store_process_groups(const ProcessGroups& base, const MeshSpec& spec);
// Whether this process's world runs over the TCP store; its clean exit and its abort.
bool store_world_up();
void shutdown_store_world();
[[noreturn]] void abort_store_world(int exit_code);

// ---- MPI errors (mpi_communicator.cpp) ----

// MPI's words for an error code.
std::string mpi_error_string(int rc);
// Throws for a failed MPI call: "<call> failed on group 'shard' (rank 1 of 2, world rank
// 3 on host n01): <MPI's error string>". group_rank < 0 when no group exists yet.
[[noreturn]] void mpi_fail(int rc, const char* call, const char* group, int group_rank, int group_size,
                           const char* file, int line);

}  // namespace fsdp::dist::detail

// One checking layer for MPI calls (cf. nccl-tests' MPICHECK): the call text, the group
// and its rank go into the error.
#define FSDP_MPI_CHECK(call, group, group_rank, group_size)                                                   \
  do {                                                                                                        \
    const int fsdp_mpi_rc_ = (call);                                                                          \
    if (fsdp_mpi_rc_ != MPI_SUCCESS) [[unlikely]]                                                             \
      ::fsdp::dist::detail::mpi_fail(fsdp_mpi_rc_, #call, group, group_rank, group_size, __FILE__, __LINE__); \
  } while (0)
