// Collectives over a process group, the only way ranks talk to each other.
// Backends: MPI for CPU tensors (OpenMPI), NCCL for CUDA tensors, and a single-rank
// communicator for a process started without any launcher (no MPI at all, so a laptop
// run starts instantly and needs no mpirun).
//
// Semantics (PyTorch's torch.distributed, rank order = group rank order):
//   all_gather(shard [n], full [n * size]):   full = concat over ranks of shard
//   reduce_scatter(full [n * size], shard [n]): shard = sum over ranks of full[rank*n : (rank+1)*n]
//   all_reduce(x):   x = sum over ranks of x           (in place)
//   broadcast(x, root): x = root's x                    (in place)
//   all_to_all_v(send, send_counts, recv, recv_counts): send holds size() consecutive runs,
//       run j (send_counts[j] elements) going to group rank j; recv gets size() consecutive
//       runs, run i (recv_counts[i] elements) from group rank i. Counts are elements, known on
//       the host, and must agree pairwise (my send_counts[j] == rank j's recv_counts[me]);
//       exchange them first (an all_gather of the counts) when only the sender knows them.
//       Expert parallelism's token dispatch and combine (issue 28).
// All tensors contiguous, same dtype on every rank; float32, float64, bfloat16 and
// float16 (half sums are computed in float32 and rounded once per addition). in/out must not
// overlap except all_reduce / broadcast, which are in place.
//
// Every call is non-blocking: it returns a Request; wait(request) blocks until it has
// completed (and its output may be read / its input reused). A blocking call is
// `wait(op(...))`. Requests complete in any order; waiting twice is an error.
//
// Byte accounting (stats()): each call adds the bytes THIS rank sends under the ring
// algorithm, the volume FSDP's cost model uses, independent of what the library does
// internally: all_gather (size-1)*bytes(shard); reduce_scatter (size-1)*bytes(shard);
// all_reduce 2*(size-1)/size*bytes(x); broadcast bytes(x) on every rank but the last in
// the ring (so size-1 ranks send bytes(x) in total); all_to_all_v the bytes of the runs sent
// to the other ranks (its own run is a local copy). A size-1 group sends nothing.
// wait_seconds sums the wall time spent inside wait().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fsdp/core/tensor.h"
#include "fsdp/dist/mesh.h"

namespace fsdp::dist {

struct CommStats {
  uint64_t bytes_sent = 0;
  uint64_t calls = 0;
  double wait_seconds = 0;
};

struct Request {
  int64_t id = -1;  // -1: already complete (nothing to wait for)
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  // rank inside this group
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "world", "shard", "replicate" (for messages)

  virtual Request all_gather(const Tensor& shard, const Tensor& full) = 0;
  virtual Request reduce_scatter(const Tensor& full, const Tensor& shard) = 0;
  virtual Request all_reduce(const Tensor& x) = 0;
  virtual Request broadcast(const Tensor& x, int root) = 0;
  // Backends without it throw fsdp::Error naming the backend and the group.
  virtual Request all_to_all_v(const Tensor& send, const std::vector<int64_t>& send_counts, const Tensor& recv,
                               const std::vector<int64_t>& recv_counts);
  virtual void barrier() = 0;
  virtual void wait(Request r) = 0;

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = CommStats{}; }

  // The members as ranks of the world, in group-rank order (for messages and the watchdog).
  const std::vector<int>& world_ranks() const { return world_ranks_; }

 protected:
  CommStats stats_;
  std::vector<int> world_ranks_;
};

// "world rank 3", "world ranks 0-3", "world ranks 0, 2, 4, ...": a group's members in a message.
std::string describe_world_ranks(const std::vector<int>& ranks);

// What the launch environment says about this process, read once at start-up.
struct WorldInfo {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;  // among the ranks on this node
  int num_nodes = 1;
  int node_index = 0;                  // 0 .. num_nodes-1, in order of each node's lowest rank
  std::string hostname;
  std::string launcher;                // "none", "mpirun", "srun", "torchrun" (how it was detected)
  std::string bootstrap = "none";      // how the ranks met: "none", "MPI", "the TCP store at h:p (...)"
  std::vector<std::string> hosts;      // every world rank's host name, by world rank
  std::vector<int> node_of_rank;       // every world rank's node_index, by world rank
};

// The process groups a run needs, each a group of the device mesh (mesh.h):
//   world:     every rank
//   shard:     the ranks that shard parameters among themselves (FULL_SHARD,
//              SHARD_GRAD_OP: every data-parallel rank; HYBRID_SHARD, HYBRID_SHARD_ZERO2:
//              shard_group_size of them; NO_SHARD: only this rank)
//   replicate: the ranks holding the same shard (data-parallel ranks / shard)
//   tensor:    the ranks holding the other tensor-parallel slices (parallel.tensor of
//              them; this rank alone without tensor parallelism)
//   expert:    the ranks that split each MoE layer's experts and trade tokens by
//              all_to_all_v (parallel.expert of them; this rank alone without expert
//              parallelism)
//   expert_shard: the ranks an expert unit is sharded over: the shard group's ranks that hold
//              the same experts (shard / expert of them; the shard group itself without
//              expert parallelism). Expert units replicate over `replicate`, as the rest.
struct ProcessGroups {
  WorldInfo world_info;
  DeviceMesh mesh;
  // shared: split groups reuse world
  std::shared_ptr<Communicator> world, shard, replicate, tensor, expert, expert_shard;
};

// Initialises MPI if the process was started by mpirun / mpiexec / srun --mpi=pmix
// (detected from the environment: OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK, ...) and
// returns MPI communicators; a process started without MPI by torchrun-style variables
// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or by srun without --mpi meets the others
// through the TCP store instead (fsdp/dist/rendezvous.h, tcp_store.h) and gets store
// communicators, which carry the host collectives of a GPU run (the CPU backend across ranks
// needs MPI); otherwise returns single-rank communicators without ever touching MPI. The
// groups are the device mesh's for `spec` (mesh.h); a layout the world cannot hold
// (mesh_problem) is an error naming the key and the rank. Call once per process.
ProcessGroups init_process_groups(const MeshSpec& spec);
// Without tensor parallelism: shard_group_size must divide the world size (error naming
// both, and the rank); 0 means the whole world and -1 the ranks of one node (the hybrid
// strategies' default; every node must then run the same number of ranks).
ProcessGroups init_process_groups(int shard_group_size);

// init_process_groups' first half: MPI up (as above) and the world with its WorldInfo
// (rank, size, nodes, node_of_rank); shard, replicate and tensor are not set and the mesh
// is one rank's. A caller that must judge the layout against the world before splitting it
// (train's start-up: a layout the world cannot hold is a config error) calls this, then
// split_process_groups.
ProcessGroups init_world_groups();

// The mesh's groups over an existing world (a collective over base.world; the world
// communicator is shared, not duplicated): lets one process run several layouts (tests)
// and is how init_process_groups builds its own. Same rules as above.
ProcessGroups split_process_groups(const ProcessGroups& base, const MeshSpec& spec);
ProcessGroups split_process_groups(const ProcessGroups& base, int shard_group_size);

// Single-rank groups that never touch MPI: what init_process_groups returns for a
// process started without a launcher, and what tests use for single-process references.
ProcessGroups local_process_groups();

// Finalises MPI if init_process_groups initialised it (also done at exit); in a job launched
// without MPI, says bye to the TCP store and waits for every rank's.
void shutdown_distributed();

// MPI_Abort when MPI is up (so one failing rank does not leave the others hanging in a
// collective), the TCP store's abort in a job launched without MPI, std::exit otherwise.
[[noreturn]] void abort_all(int exit_code);

}  // namespace fsdp::dist
