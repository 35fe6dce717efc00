// The start-up of a GPU job launched without MPI (torchrun-style variables, or srun without
// --mpi): world rank 0 hosts the TCP store, every rank joins it, the node layout comes from
// the ranks' host names, and the host groups (world, shard, replicate) are store
// communicators. NCCL's unique id then travels over them (make_nccl_process_groups), as it
// does over MPI otherwise. See fsdp/dist/tcp_store.h for what ends such a job and how.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "detail.h"
#include "fsdp/dist/watchdog.h"

namespace fsdp::dist::detail {
namespace {

struct StoreWorld {
  std::unique_ptr<TcpStoreServer> server;  // world rank 0 only
  std::shared_ptr<TcpStoreClient> client;
};

StoreWorld& the_world() {
  static StoreWorld w;
  return w;
}

// How the job ends under this rank (an abort relayed by the store, rank 0 gone, a refused
// join): the line in the run's log, the NCCL communicators aborted, the exit code.
[[noreturn]] void end_job(int exit_code, const std::string& line) {
  if (!line.empty()) {
    if (watchdog_options().log_line) {
      watchdog_options().log_line(line);
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
  }
  run_watchdog_abort_hooks();
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(exit_code);
}

// The ranks on each host, by host, in world-rank order; hosts keyed in order of their lowest rank.
struct Nodes {
  std::vector<std::string> order;                     // hosts by node index
  std::map<std::string, std::vector<int>> ranks;      // host -> its world ranks
};

Nodes nodes_of(const std::vector<std::string>& hosts) {
  Nodes n;
  for (int r = 0; r < int(hosts.size()); ++r) {
    auto& list = n.ranks[hosts[size_t(r)]];
    if (list.empty()) n.order.push_back(hosts[size_t(r)]);
    list.push_back(r);
  }
  return n;
}

std::shared_ptr<Communicator> group(const std::shared_ptr<TcpStoreClient>& client, const char* name,
                                    std::vector<int> members, int world_rank) {
  if (members.size() == 1) return make_local_communicator(name, world_rank);
  return make_store_communicator(client, name, std::move(members));
}

}  // namespace

ProcessGroups init_store_world_groups(const Rendezvous& rv) {
  StoreWorld& w = the_world();
  FSDP_CHECK(w.client == nullptr, "init_process_groups: the TCP store world is already up");
  const double timeout = watchdog_options().timeout_s;
  const StoreIdentity me{rv.job, rv.world_size, rv.rank, host_name(), int64_t(::getpid())};
  std::string where = rv.master_addr;
  if (rv.rank == 0) {
    try {
      w.server = std::make_unique<TcpStoreServer>(rv.master_port, me, timeout);
    } catch (const Error& e) {
      end_job(kStoreExitUsage, e.what());
    }
    where = "localhost";  // its own store, whatever MASTER_ADDR resolves to here
  }
  w.client = std::make_shared<TcpStoreClient>(where, rv.master_port, me, timeout, &end_job);
  const std::vector<std::string> hosts = w.client->join_all();

  ProcessGroups base;
  WorldInfo& info = base.world_info;
  info.rank = rv.rank;
  info.size = rv.world_size;
  info.hostname = me.host;
  info.launcher = rv.launcher;
  info.bootstrap = fmt::format("the TCP store at {}:{} ({})", rv.master_addr, rv.master_port, rv.port_source);
  info.hosts = hosts;
  const Nodes nodes = nodes_of(hosts);
  const std::vector<int>& mine = nodes.ranks.at(me.host);
  info.local_rank = int(std::find(mine.begin(), mine.end(), rv.rank) - mine.begin());
  info.local_size = int(mine.size());
  info.num_nodes = int(nodes.order.size());
  info.node_index = int(std::find(nodes.order.begin(), nodes.order.end(), me.host) - nodes.order.begin());
  info.node_of_rank.assign(size_t(rv.world_size), 0);
  for (int n = 0; n < int(nodes.order.size()); ++n)
    for (int r : nodes.ranks.at(nodes.order[size_t(n)])) info.node_of_rank[size_t(r)] = n;
  // The launcher's own count must agree with the hosts': each rank takes the GPU of its local rank.
  FSDP_CHECK(rv.local_rank < 0 || rv.local_rank == info.local_rank,
             "{}={} on world rank {} (host {}), but by the ranks' host names it is local rank {} of {} there: the "
             "launcher and the host names disagree on which ranks share a node",
             rv.local_rank_var, rv.local_rank, rv.rank, me.host, info.local_rank, info.local_size);

  start_watchdog(make_store_watchdog_channel(w.client), hosts);
  std::vector<int> all(size_t(rv.world_size));
  for (int r = 0; r < rv.world_size; ++r) all[size_t(r)] = r;
  base.world = make_store_communicator(w.client, "world", all);
  return base;
}

ProcessGroups split_store_process_groups(const ProcessGroups& base, const MeshSpec& spec) {
  const WorldInfo& w = base.world_info;
  const std::shared_ptr<TcpStoreClient> client = store_client_of(*base.world);
  FSDP_CHECK(client != nullptr, "split_store_process_groups: world '{}' is not a TCP store group", base.world->name());
  // As split_process_groups does over MPI: every group is the mesh's (node_of_rank is the
  // same on every rank, so every rank accepts or throws alike).
  const MeshShape shape = resolve_mesh_shape(spec, w.size, w.node_of_rank, w.rank);
  ProcessGroups g;
  g.world_info = w;
  g.world = base.world;
  g.mesh = DeviceMesh(shape, w.node_of_rank);
  g.shard = group(client, "shard", g.mesh.group(w.rank, {MeshDim::Shard, MeshDim::Expert}), w.rank);
  g.replicate = group(client, "replicate", g.mesh.group(w.rank, {MeshDim::Replicate}), w.rank);
  g.tensor = group(client, "tensor", g.mesh.group(w.rank, {MeshDim::Tensor}), w.rank);
  g.expert = group(client, "expert", g.mesh.group(w.rank, {MeshDim::Expert}), w.rank);
  g.expert_shard = group(client, "expert shard", g.mesh.group(w.rank, {MeshDim::Shard}), w.rank);
  return g;
}

bool store_world_up() { return the_world().client != nullptr; }

void shutdown_store_world() {
  StoreWorld& w = the_world();
  if (w.client == nullptr) return;
  stop_watchdog();
  // Every rank waits for the others' bye, so rank 0's store outlives every question.
  w.client->bye(std::max(60.0, watchdog_options().timeout_s));
  w.client.reset();
  if (w.server != nullptr) w.server->wait_for_byes(10);
  w.server.reset();
}

[[noreturn]] void abort_store_world(int exit_code) {
  StoreWorld& w = the_world();
  if (w.client != nullptr) w.client->abort(exit_code, "");
  end_job(exit_code, "");
}

}  // namespace fsdp::dist::detail
