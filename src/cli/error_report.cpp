// The commands' one way of reporting their final error; see error_report.h.
#include "fsdp/cli/error_report.h"

#include <spdlog/cfg/env.h>
#include <spdlog/spdlog.h>

#include "fsdp/core/error.h"

namespace fsdp::cli {

void report_error(const std::exception& e) {
  spdlog::error("{}", e.what());
  log_where(e);
}

void log_where(const std::exception& e) {
  if (const auto* err = dynamic_cast<const Error*>(&e); err != nullptr && !err->where().empty())
    spdlog::debug("(raised {})", err->where());
}

void apply_log_level_from_env() { spdlog::cfg::load_env_levels(); }

}  // namespace fsdp::cli
