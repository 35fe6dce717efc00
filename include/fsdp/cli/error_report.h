// How every fsdp_train command reports the error that ends it, in one format:
//
//   fsdp_train <command>: error: <what>
//
// on stderr: the one line a user reads (fsdp::Error::what()), a usage error with a pointer to
// the command's --help. For whoever debugs, where it was raised (Error::where(): the failed
// check and its source line) goes to the log at debug level, shown with
// `--set logging.level=debug` or SPDLOG_LEVEL=debug. A training run's rank 0 also writes the
// line into its <run.dir>/train.log.
#pragma once

#include <exception>
#include <string>
#include <string_view>

namespace fsdp::cli {

// "fsdp_train <command>: error: <message>" ("fsdp_train: error: ..." without a command) on
// stderr, after the log's pending lines, and into the log's files (train.log).
void print_error(std::string_view command, std::string_view message);
// The same for a bad command line, ending "(see fsdp_train <command> --help)".
void print_usage_error(std::string_view command, std::string_view message);
// print_error(command, e.what()), then log_where(e).
void report_error(std::string_view command, const std::exception& e);
// For an fsdp::Error, where() at debug level.
void log_where(const std::exception& e);

// Applies SPDLOG_LEVEL from the environment (e.g. SPDLOG_LEVEL=debug): the subcommands
// without a config (prepare, generate, export) take their log level from there.
void apply_log_level_from_env();

}  // namespace fsdp::cli
