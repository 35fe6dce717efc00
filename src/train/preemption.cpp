#include "fsdp/train/preemption.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

namespace fsdp::train {

namespace {

std::atomic<int> g_first_signal{0};
std::atomic<int> g_count{0};

void on_signal(int sig) {
  // Async-signal-safe only: atomics, write(2), _exit(2).
  if (g_count.fetch_add(1) == 0) {
    g_first_signal.store(sig);
    const char msg[] = "fsdp_train: preemption signal received: finishing this step, then checkpointing and exiting "
                       "(send it again to exit at once)\n";
    [[maybe_unused]] ssize_t w = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
    return;
  }
  const char msg[] = "fsdp_train: second signal: exiting at once without a checkpoint\n";
  [[maybe_unused]] ssize_t w = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
  ::_exit(128 + sig);
}

}  // namespace

void install_preemption_handlers() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
  std::signal(SIGXFSZ, SIG_IGN);
}

int preemption_signal() { return g_first_signal.load(); }

void reset_preemption_signal() {
  g_first_signal.store(0);
  g_count.store(0);
}

}  // namespace fsdp::train
