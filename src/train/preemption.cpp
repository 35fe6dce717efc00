// Preemption signals: the flag the trainer polls at step boundaries; see preemption.h.
#include "fsdp/train/preemption.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <utility>

namespace fsdp::train {

namespace {

std::atomic<int> g_first_signal{0};
std::atomic<int> g_count{0};

// The signals that mean "checkpoint and stop", with their names for the message.
constexpr std::pair<int, const char*> kStopSignals[] = {
    {SIGTERM, "SIGTERM"}, {SIGUSR1, "SIGUSR1"}, {SIGINT, "SIGINT"}, {SIGHUP, "SIGHUP"}};

void write_text(const char* text) { [[maybe_unused]] ssize_t w = ::write(STDERR_FILENO, text, std::strlen(text)); }

void on_signal(int sig) {
  // Async-signal-safe only: atomics, write(2), strlen, _exit(2).
  if (g_count.fetch_add(1) == 0) {
    g_first_signal.store(sig);
    write_text("fsdp_train: preemption signal received (");
    for (const auto& [number, name] : kStopSignals)
      if (number == sig) write_text(name);
    write_text("): finishing this step, then checkpointing and exiting (send it again to exit at once)\n");
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
  for (const auto& [number, name] : kStopSignals) {
    // A terminal's signals stay ignored where the launcher ignores them: nohup (SIGHUP) and
    // a shell's background job (SIGINT) must keep running when the terminal goes away.
    struct sigaction old {};
    sigaction(number, nullptr, &old);
    const bool terminal = number == SIGINT || number == SIGHUP;
    if (terminal && old.sa_handler == SIG_IGN) continue;
    sigaction(number, &sa, nullptr);
  }
  std::signal(SIGXFSZ, SIG_IGN);
}

int preemption_signal() { return g_first_signal.load(); }

void reset_preemption_signal() {
  g_first_signal.store(0);
  g_count.store(0);
}

}  // namespace fsdp::train
