// The TCP store: how the ranks of a GPU job launched without MPI find each other (torchrun's
// c10d TCPStore, in the few operations fsdp_train needs). World rank 0 hosts the server on
// MASTER_ADDR:MASTER_PORT; every rank, rank 0 included, holds one client connection to it.
//
// What travels over it:
//   join       each rank says who it is (job, WORLD_SIZE, RANK, host, pid); the server refuses a
//              rank of another job, a different WORLD_SIZE, or a RANK already taken, and once
//              every rank has joined, all learn every rank's host (the node layout);
//   gather     a keyed all-to-all of small byte strings: every member of a group contributes
//              its bytes under one key and receives everyone's, in group-rank order. The host
//              collectives of a GPU run (the loss, the step votes, the config check, NCCL's
//              unique id) are gathers (store_communicator.cpp);
//   watchdog   the collective watchdog's census messages, relayed rank to rank;
//   abort      one rank ends the job with an exit code and a line: the server tells every
//              rank, which logs the line and exits with that code (MPI_Abort's role);
//   bye        a clean exit: the server waits for every rank's bye before it closes.
//
// Failures, each one line naming the rank (and host) at fault, on every rank that is still
// there (exit codes as in train/exit_codes.h):
//   a rank's connection closes without a bye   -> "world rank K (host H) left the job without
//                                                  finishing (died or was killed)", exit 76
//   the server's host (rank 0) dies            -> every client: "world rank 0 (host H), which
//                                                  hosts the TCP store, is gone", exit 76
//   not every rank joins within the timeout    -> "world rank(s) K never joined ... within
//                                                  dist.timeout_s", exit 76
//   MASTER_PORT is taken on rank 0's host      -> rank 0: "cannot host the TCP store on port P
//                                                  ... in use", exit 2; the others time out
//                                                  (or find a foreign store and say so, exit 2)
//   WORLD_SIZE differs, a RANK is duplicated   -> exit 2, naming both ranks' values
//
// Threads: the client's reader thread receives replies, relayed watchdog messages and aborts;
// requests may come from any thread (a mutex orders writes). The server is a thread of rank 0's
// process polling every connection.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace fsdp::dist {

// Who a rank says it is when it joins.
struct StoreIdentity {
  std::string job;  // the job's key: a rank of another job is refused ("12345.0", or MASTER_ADDR:PORT)
  int world_size = 1;
  int rank = 0;
  std::string host;
  int64_t pid = 0;
};

// Exit codes the store ends a job with (the values of train/exit_codes.h, which dist cannot see).
constexpr int kStoreExitUsage = 2;
constexpr int kStoreExitPeerFailure = 76;

class TcpStoreServer {
 public:
  // Listens on `port` of every interface (0: any free port, for tests). Throws fsdp::Error
  // naming the port when it cannot ("... is in use ...: set MASTER_PORT to a free port").
  // join_timeout_s: seconds the ranks have to join (0: no limit).
  TcpStoreServer(int port, StoreIdentity owner, double join_timeout_s);
  ~TcpStoreServer();  // stops at once (a clean end waits for the byes first: wait_for_byes)
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }
  // Until every joined rank has said bye or left, at most timeout_s.
  void wait_for_byes(double timeout_s);

 private:
  struct State;
  void loop();

  int port_ = 0;
  int listen_fd_ = -1;
  int wake_fd_[2] = {-1, -1};  // a pipe: the destructor's "stop now"
  std::unique_ptr<State> state_;
  std::thread thread_;
};

class TcpStoreClient {
 public:
  // What the client does when the job ends under it (an abort relayed by the server, or the
  // server gone): exit_code and the one line. The default logs the line to stderr and
  // _exit()s with the code; a handler that returns leaves the client failed, and every
  // pending and later request throws fsdp::Error with the line (tests).
  using AbortHandler = std::function<void(int exit_code, const std::string& line)>;

  // Connects to host:port (retrying until timeout_s: rank 0 may start later; 0 = no limit)
  // and joins as `me`. Returns once the server accepted this rank; join_all() then waits for
  // everyone. Throws fsdp::Error with the one line when it cannot (no store within the time,
  // a foreign store, a refusal).
  TcpStoreClient(const std::string& host, int port, StoreIdentity me, double timeout_s,
                 AbortHandler on_abort = nullptr);
  ~TcpStoreClient();  // closes without a bye: the server takes it as this rank leaving
  TcpStoreClient(const TcpStoreClient&) = delete;
  TcpStoreClient& operator=(const TcpStoreClient&) = delete;

  const StoreIdentity& identity() const { return me_; }
  std::string address() const;  // "host:port"

  // Every rank's host, by world rank, once all have joined (a gather on the join key).
  std::vector<std::string> join_all();

  // Starts a gather: `data` as group rank `group_rank` of `group_size` under `key`; returns
  // its ticket. ready() waits up to `wait` for the answer; take() returns every member's
  // bytes in group-rank order (and forgets the ticket). Keys must be unique per gather.
  uint64_t gather(const std::string& key, int group_size, int group_rank, std::string data);
  bool ready(uint64_t ticket, std::chrono::milliseconds wait);
  std::vector<std::string> take(uint64_t ticket);
  // gather + wait without a deadline: for start-up exchanges outside any watchdog.
  std::vector<std::string> gather_now(const std::string& key, int group_size, int group_rank, std::string data);

  // The watchdog's census messages (fsdp/dist/watchdog.h), relayed by the server.
  void send_to(int world_rank, std::string payload);
  bool receive(int* from, std::string* payload);

  // Ends the job: the server tells every rank (this one included) to log `line` (unless
  // empty) and exit with exit_code. Returns only in tests (a returning handler).
  void abort(int exit_code, const std::string& line);
  // A clean exit: says bye and waits (at most timeout_s) until every rank has.
  void bye(double timeout_s);

 private:
  void reader();
  void send_frame(int type, const std::string& payload);
  void end(int exit_code, const std::string& line);      // the job ended under this client
  void failed(int exit_code, const std::string& line);  // under mu_
  void check_alive() const;                              // under mu_

  StoreIdentity me_;
  std::string host_;
  int port_ = 0;
  int fd_ = -1;
  AbortHandler on_abort_;
  std::mutex write_mu_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_ticket_ = 1;
  std::map<uint64_t, std::vector<std::string>> answers_;
  std::deque<std::pair<int, std::string>> inbox_;
  bool joined_ = false;
  bool bye_acked_ = false;
  bool dead_ = false;
  std::string dead_line_;
  int exit_code_ = 0;
  std::string rank0_host_;  // for the line when rank 0 is gone, once known
  bool closing_ = false;
  std::thread reader_;
};

}  // namespace fsdp::dist
