// TensorBoard event files (fsdp/obs/tensorboard.h).
#include "fsdp/obs/tensorboard.h"

#include <unistd.h>  // gethostname

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "fsdp/core/error.h"
#include "fsdp/obs/tf_event.h"
#include "fsdp/obs/tfrecord.h"

namespace fsdp::obs {
namespace {

namespace fs = std::filesystem;

const std::map<std::string, std::string>& groups() {
  static const std::map<std::string, std::string> g = {
      {"loss", "loss"},           {"val_loss", "loss"},         {"ce_loss", "loss"},
      {"aux_loss", "loss"},       {"z_loss", "loss"},           {"lr", "optim"},
      {"grad_norm", "optim"},     {"loss_scale", "optim"},      {"skipped", "optim"},
      {"samples_per_sec", "throughput"}, {"tokens_per_sec", "throughput"}, {"step_ms", "throughput"},
      {"gflops_per_sec", "throughput"},  {"mfu", "throughput"},      {"tokens", "data"},
      {"tokens_seen", "data"},    {"data_wait_ms", "data"},     {"peak_mem_bytes", "memory"},
      {"max_rss_bytes", "memory"}, {"peak_mem_category_bytes", "memory"}, {"comm_bytes", "comm"},
      {"comm_wait_ms", "comm"},   {"world_size", "comm"},       {"expert_imbalance", "moe"},
      {"expert_load", "moe"}};
  return g;
}

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A file name no other run took: events.out.tfevents.<unix seconds>.<host>, with .0001,
// .0002, ... added when runs in this directory started in the same second (the names still
// sort in the order the runs started, which is the order TensorBoard reads them in).
std::string new_file_name(const fs::path& dir) {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "localhost");
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(
      std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string base = (dir / fmt::format("events.out.tfevents.{}.{}", secs, host)).string();
  std::string p = base;
  for (int k = 1; fs::exists(p); ++k) p = fmt::format("{}.{:04}", base, k);
  return p;
}

}  // namespace

std::vector<std::pair<std::string, float>> tensorboard_scalars(const StepMetrics& m) {
  // From the JSON line itself, so TensorBoard gets exactly what metrics.jsonl holds.
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(to_json_line(m));
  std::vector<std::pair<std::string, float>> out;
  for (const auto& [field, value] : j.items()) {
    if (field == "step") continue;
    const auto g = groups().find(field);
    const std::string tag = (g != groups().end() ? g->second : std::string("other")) + "/" + field;
    if (value.is_number() || value.is_boolean()) {
      out.emplace_back(tag, value.is_boolean() ? (value.get<bool>() ? 1.0f : 0.0f) : value.get<float>());
    } else if (value.is_array()) {  // per layer; expert_load: per layer and expert
      for (size_t l = 0; l < value.size(); ++l) {
        if (value[l].is_number()) out.emplace_back(fmt::format("{}/layer_{}", tag, l), value[l].get<float>());
        if (!value[l].is_array()) continue;
        for (size_t e = 0; e < value[l].size(); ++e)
          out.emplace_back(fmt::format("{}/layer_{}/expert_{}", tag, l, e), value[l][e].get<float>());
      }
    }
  }
  return out;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int64_t first_step) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  FSDP_CHECK(!ec, "logging.tensorboard: cannot create {}: {}", dir, ec.message());
  path_ = new_file_name(dir);
  f_ = std::fopen(path_.c_str(), "wbx");
  FSDP_CHECK(f_ != nullptr, "logging.tensorboard: cannot create {}: {}", path_, std::strerror(errno));
  append(tf_event::file_version(wall_time()));
  append(tf_event::session_start(wall_time(), first_step));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (f_ != nullptr) std::fclose(f_);
}

void TensorBoardWriter::write(const StepMetrics& m) { append(tf_event::scalars(wall_time(), m.step, tensorboard_scalars(m))); }

void TensorBoardWriter::append(const std::string& event) {
  const std::string record = tfrecord::frame(event);
  FSDP_CHECK(std::fwrite(record.data(), 1, record.size(), f_) == record.size() && std::fflush(f_) == 0,
             "logging.tensorboard: cannot write {}: {}", path_, std::strerror(errno));
}

}  // namespace fsdp::obs
