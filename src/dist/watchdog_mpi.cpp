// The collective watchdog's side channel in an MPI job: a duplicate of MPI_COMM_WORLD of its
// own, so census messages never match a collective's (Note [Watchdog census], watchdog.cpp).
#include <mpi.h>
#include <unistd.h>

#include <cstring>
#include <list>

#include "detail.h"

namespace fsdp::dist::detail {
namespace {

constexpr int kTag = 7701;

class MpiWatchdogChannel final : public WatchdogChannel {
 public:
  explicit MpiWatchdogChannel(MPI_Comm side) : side_(side) { MPI_Comm_rank(side_, &rank_); }

  int rank() const override { return rank_; }

  void send(int to, const std::vector<int64_t>& m) override {
    sends_.push_back(Pending{m});
    Pending& p = sends_.back();
    if (MPI_Isend(p.message.data(), int(p.message.size()), MPI_INT64_T, to, kTag, side_, &p.request) != MPI_SUCCESS)
      sends_.pop_back();
  }

  bool receive(int* from, std::vector<int64_t>* m) override {
    int flag = 0, n = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kTag, side_, &flag, &st) != MPI_SUCCESS || !flag) return false;
    if (MPI_Get_count(&st, MPI_INT64_T, &n) != MPI_SUCCESS || n < 1) n = 1;
    m->assign(size_t(n), 0);
    if (MPI_Recv(m->data(), n, MPI_INT64_T, st.MPI_SOURCE, kTag, side_, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    *from = st.MPI_SOURCE;
    return true;
  }

  void progress() override {
    for (auto it = sends_.begin(); it != sends_.end();) {
      int flag = 0;
      if (MPI_Test(&it->request, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag) {
        it = sends_.erase(it);
      } else {
        ++it;
      }
    }
  }

  [[noreturn]] void abort(int exit_code) override {
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    ::_exit(exit_code);
  }

  // The side communicator is left to MPI_Finalize: freeing it is collective, and a rank on
  // its way out must not wait for the others.
  void stop() override {
    for (Pending& p : sends_) MPI_Request_free(&p.request);
    sends_.clear();
  }

 private:
  struct Pending {
    std::vector<int64_t> message;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  MPI_Comm side_;
  int rank_ = 0;
  std::list<Pending> sends_;  // stable addresses: MPI reads each buffer until its send completes
};

}  // namespace

void start_watchdog(MPI_Comm world) {
  MPI_Comm side = MPI_COMM_NULL;
  MPI_Comm_dup(world, &side);
  MPI_Comm_set_errhandler(side, MPI_ERRORS_RETURN);
  int size = 1;
  MPI_Comm_size(side, &size);
  constexpr int kHost = 64;
  std::vector<char> mine(kHost, '\0'), all(size_t(size) * kHost, '\0');
  std::strncpy(mine.data(), host_name().c_str(), kHost - 1);
  MPI_Allgather(mine.data(), kHost, MPI_CHAR, all.data(), kHost, MPI_CHAR, side);
  std::vector<std::string> hosts;
  for (int r = 0; r < size; ++r) hosts.emplace_back(all.data() + size_t(r) * kHost);
  start_watchdog(std::make_unique<MpiWatchdogChannel>(side), std::move(hosts));
}

}  // namespace fsdp::dist::detail
