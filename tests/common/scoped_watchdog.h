// Watchdog options for one test (fsdp/dist/watchdog.h), restored afterwards with the step it
// reports, so the other tests run under the binary's default (armed, 600 s, aborting).
#pragma once

#include "fsdp/dist/watchdog.h"

namespace fsdp::test {

struct ScopedWatchdog {
  explicit ScopedWatchdog(dist::WatchdogOptions o) : saved(dist::watchdog_options()) {
    dist::configure_watchdog(std::move(o));
  }
  ~ScopedWatchdog() {
    dist::configure_watchdog(saved);
    dist::set_watchdog_step(-1);
  }
  ScopedWatchdog(const ScopedWatchdog&) = delete;
  ScopedWatchdog& operator=(const ScopedWatchdog&) = delete;
  dist::WatchdogOptions saved;
};

}  // namespace fsdp::test
