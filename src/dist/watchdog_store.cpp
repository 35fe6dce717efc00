// The collective watchdog's side channel in a job launched without MPI: census messages
// relayed by the TCP store (fsdp/dist/tcp_store.h), and the store's abort in MPI_Abort's place.
#include <cstring>

#include "detail.h"

namespace fsdp::dist::detail {
namespace {

class StoreWatchdogChannel final : public WatchdogChannel {
 public:
  explicit StoreWatchdogChannel(std::shared_ptr<TcpStoreClient> client) : client_(std::move(client)) {}

  int rank() const override { return client_->identity().rank; }

  void send(int to, const std::vector<int64_t>& m) override {
    client_->send_to(to, std::string(reinterpret_cast<const char*>(m.data()), m.size() * sizeof(int64_t)));
  }

  bool receive(int* from, std::vector<int64_t>* m) override {
    std::string bytes;
    if (!client_->receive(from, &bytes)) return false;
    m->assign(bytes.size() / sizeof(int64_t), 0);
    std::memcpy(m->data(), bytes.data(), m->size() * sizeof(int64_t));
    return true;
  }

  // The watchdog has said why (its report line), so the others only learn who ended the job.
  [[noreturn]] void abort(int exit_code) override { abort_store_world(exit_code); }

 private:
  std::shared_ptr<TcpStoreClient> client_;
};

}  // namespace

std::unique_ptr<WatchdogChannel> make_store_watchdog_channel(std::shared_ptr<TcpStoreClient> client) {
  return std::make_unique<StoreWatchdogChannel>(std::move(client));
}

}  // namespace fsdp::dist::detail
