// How every fsdp_train command reports the error that ends it: the one line a user reads
// (fsdp::Error::what()), and, for whoever debugs, where it was raised (Error::where(): the
// failed check and its source line) at debug level, shown with `--set logging.level=debug`
// or SPDLOG_LEVEL=debug.
#pragma once

#include <exception>

namespace fsdp::cli {

// Logs e's message at error level through spdlog, then log_where(e).
void report_error(const std::exception& e);
// For an fsdp::Error, where() at debug level (commands that print their error themselves).
void log_where(const std::exception& e);

// Applies SPDLOG_LEVEL from the environment (e.g. SPDLOG_LEVEL=debug): the subcommands
// without a config (prepare, generate, export) take their log level from there.
void apply_log_level_from_env();

}  // namespace fsdp::cli
