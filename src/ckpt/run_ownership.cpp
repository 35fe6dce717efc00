// Run ids and another run's checkpoints moved aside; see run_ownership.h.
#include "fsdp/ckpt/run_ownership.h"

#include <ctime>
#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "fsdp/ckpt/checkpoint_reader.h"
#include "fsdp/core/error.h"
#include "fsdp/core/regular_file.h"

namespace fsdp::ckpt {

namespace fs = std::filesystem;

std::string utc_stamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string new_run_id() {
  std::random_device rd;
  return fmt::format("{}-{:08x}", utc_stamp(), uint32_t(rd()));
}

std::vector<CheckpointOwner> checkpoint_owners(const std::string& dir) {
  std::vector<CheckpointOwner> out;
  for (const std::string& path : list_checkpoints(dir)) {
    CheckpointOwner o;
    o.path = path;
    o.step = std::stoll(fs::path(path).filename().string().substr(5));  // list_checkpoints parsed it
    try {
      const std::string manifest = (fs::path(path) / kManifestFile).string();
      o.run_id = parse_manifest(read_regular_file(manifest), manifest).run_id;
    } catch (const Error&) {
      o.readable = false;
    }
    out.push_back(std::move(o));
  }
  return out;
}

std::string move_checkpoints_aside(const std::string& dir, const std::vector<CheckpointOwner>& owners) {
  fs::path aside = fs::path(dir) / ("replaced-" + utc_stamp());
  for (int i = 2; fs::exists(aside); ++i) aside = fs::path(dir) / fmt::format("replaced-{}-{}", utc_stamp(), i);
  std::error_code ec;
  fs::create_directory(aside, ec);
  FSDP_CHECK(!ec, "cannot create {}: {}", aside.string(), ec.message());
  for (const CheckpointOwner& o : owners) {
    fs::rename(o.path, aside / fs::path(o.path).filename(), ec);
    FSDP_CHECK(!ec, "cannot move checkpoint {} into {}: {}", o.path, aside.string(), ec.message());
  }
  return aside.string();
}

}  // namespace fsdp::ckpt
