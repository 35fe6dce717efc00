// Outputs a run can go on without (fsdp/obs/optional_output.h).
#include "fsdp/obs/optional_output.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "fsdp/core/error.h"

namespace fsdp::obs {

std::string probe_output_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return fmt::format("cannot create {}: {}", dir, ec.message());
  const std::string probe = (std::filesystem::path(dir) / fmt::format(".probe.{}", ::getpid())).string();
  std::FILE* f = std::fopen(probe.c_str(), "w");
  if (f == nullptr) return fmt::format("cannot write in {}: {}", dir, std::strerror(errno));
  const bool ok = std::fputs("probe\n", f) >= 0 && std::fclose(f) == 0;
  const int err = errno;
  std::remove(probe.c_str());
  if (!ok) return fmt::format("cannot write in {}: {}", dir, std::strerror(err));
  return "";
}

void output_failed(const config::Config& cfg, const std::string& message) {
  if (cfg.logging.strict) FSDP_FAIL("{} (logging.strict is true: stopping)", message);
  spdlog::error("{} (training goes on without it; logging.strict: true would stop here)", message);
}

}  // namespace fsdp::obs
