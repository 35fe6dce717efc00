// The commands' one way of reporting their final error; see error_report.h.
#include "fsdp/cli/error_report.h"

#include <cstdio>
#include <memory>

#include <spdlog/cfg/env.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>

#include "fsdp/core/error.h"

namespace fsdp::cli {

namespace {

std::string headed(std::string_view command, std::string_view message) {
  // Appended piece by piece: GCC 12's -Wrestrict misreads `"..." + std::string(...)` here.
  std::string line = "fsdp_train";
  if (!command.empty()) {
    line += ' ';
    line += command;
  }
  line += ": error: ";
  line += message;
  return line;
}

// The line into the log's files only (the console gets it from stderr).
void to_log_files(const std::string& line) {
  const auto logger = spdlog::default_logger();
  if (!logger) return;
  logger->flush();
  for (const spdlog::sink_ptr& sink : logger->sinks()) {
    if (std::dynamic_pointer_cast<spdlog::sinks::basic_file_sink_mt>(sink) == nullptr) continue;
    sink->log(spdlog::details::log_msg(logger->name(), spdlog::level::err, line));
    sink->flush();
  }
}

}  // namespace

void print_error(std::string_view command, std::string_view message) {
  const std::string line = headed(command, message);
  to_log_files(line);
  std::fflush(stdout);
  std::fprintf(stderr, "%s\n", line.c_str());
}

void print_usage_error(std::string_view command, std::string_view message) {
  const std::string see = command.empty() ? "fsdp_train --help" : "fsdp_train " + std::string(command) + " --help";
  std::fflush(stdout);
  std::fprintf(stderr, "%s (see %s)\n", headed(command, message).c_str(), see.c_str());
}

void report_error(std::string_view command, const std::exception& e) {
  print_error(command, e.what());
  log_where(e);
}

void log_where(const std::exception& e) {
  if (const auto* err = dynamic_cast<const Error*>(&e); err != nullptr && !err->where().empty())
    spdlog::debug("(raised {})", err->where());
}

void apply_log_level_from_env() { spdlog::cfg::load_env_levels(); }

}  // namespace fsdp::cli
