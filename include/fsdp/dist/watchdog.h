// The collective watchdog: a collective that does not complete within a timeout (a peer
// killed, stopped, or stuck in I/O) ends the job instead of hanging it until its time limit
// (PyTorch's NCCL watchdog, TORCH_NCCL_ASYNC_ERROR_HANDLING=1, with TORCH_NCCL_DESYNC_DEBUG's
// report of which ranks did not join).
//
// How. Every blocking point of the MPI, TCP-store and NCCL communicators (wait(), barrier())
// polls its collective against a deadline instead of blocking in the library. When the deadline
// passes, or the library reports an error, this rank asks the collective's group, over a side
// channel of its own (a duplicate of MPI_COMM_WORLD; in a job launched without MPI, the TCP
// store's relay), how many collectives each member has
// entered on that group: a member that answers with a smaller count, or does not answer within
// a short grace period (dead, stopped, or stuck outside any collective), did not arrive. The
// rank then reports one line (the collective, its sequence number on the group, the group, the
// step, the ranks that did not arrive and why), tells every other rank (so that those blocked
// elsewhere report too instead of waiting for their own deadlines), lingers so they can ask it
// in turn, aborts the NCCL communicators, and ends the job (MPI_Abort) with the configured exit code,
// which also ends ranks that are stopped. A job therefore ends within timeout + about twice the
// grace period + the launcher's teardown (in a job launched without MPI the store's abort ends
// every rank in MPI_Abort's place). Ranks answer the side channel only while they
// wait in a collective, so the watchdog costs nothing between collectives and a clock read
// plus an MPI_Iprobe per millisecond of waiting inside them (bench/watchdog_bench).
//
// A rank's count of collectives on a group identifies "the same collective" on every member
// because MPI and NCCL require every member to issue a group's collectives in the same order.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fsdp::dist {

// What one rank saw of a collective that did not complete.
struct WatchdogReport {
  struct Absent {
    int world_rank = -1;
    std::string host;
    std::string why;  // "no reply ...", or "entered only N collectives on it: waits in ..."
  };
  std::string collective;  // "all_gather", ..., "barrier"
  std::string group;       // "world", "shard", "replicate"
  std::string members;     // "world ranks 0-3"
  uint64_t seq = 0;        // this collective's 1-based position among the group's collectives
  int64_t step = -1;       // the step being trained (set_watchdog_step); -1 before the first
  double waited_s = 0;     // how long this rank had waited in it
  std::string cause;       // "did not complete within 20 s", "failed (...)", "abandoned after ..."
  std::vector<Absent> absent;
  int exit_code = 0;

  // The one line every surviving rank logs.
  std::string line() const;
};

struct WatchdogOptions {
  // Seconds a collective may take before the job is aborted; 0 = never (wait forever, as
  // MPI does: e.g. while a debugger holds a rank).
  double timeout_s = 600;
  // The exit code of the aborted job (train/exit_codes.h: kExitPeerFailure in fsdp_train).
  int exit_code = 1;
  // Where the line goes (fsdp_train: its logger); empty = stderr.
  std::function<void(const WatchdogReport&)> report;
  // false (tests only): after the report, go on waiting without a deadline instead of
  // aborting the job.
  bool abort = true;
  // Where a line that ends the job from outside the watchdog goes (a job launched without MPI:
  // the TCP store's abort, or its host gone; fsdp/dist/tcp_store.h); empty = stderr.
  std::function<void(const std::string& line)> log_line;
};

// Sets the options (any time; the latest apply to the next wait). The side communicator is
// made when MPI is initialised by init_process_groups.
void configure_watchdog(WatchdogOptions options);
const WatchdogOptions& watchdog_options();

// The step the reports name (the trainer sets it at the start of each step).
void set_watchdog_step(int64_t step);

// Seconds a rank waits for the others' answers before counting the silent ones as absent:
// timeout / 10, between 1 and 5 s.
double watchdog_grace_seconds(double timeout_s);

}  // namespace fsdp::dist
