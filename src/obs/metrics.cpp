#include "fsdp/obs/metrics.h"

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fsdp/core/error.h"
#include "fsdp/core/regular_file.h"

namespace fsdp::obs {

std::string format_duration(double seconds) {
  const int64_t s = int64_t(std::llround(std::max(seconds, 0.0)));
  if (s < 3600) return fmt::format("{}:{:02}", s / 60, s % 60);
  return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
}

std::string format_step_line(const StepMetrics& m, int64_t max_steps) {
  const std::string clock = m.eta_s ? fmt::format(" ({} elapsed, ETA {})", format_duration(m.elapsed_s),
                                                  format_duration(*m.eta_s))
                                    : std::string();
  std::string line = fmt::format(
      "step {:>6}/{}{} | loss {:.4f} | lr {:.3e} | grad_norm {:.4f} | {:.1f} samples/s | {:.0f} tokens/s | "
      "{:.1f} ms/step | {:.2f} GFLOP/s | peak mem {:.1f} MiB (rss {:.1f} MiB; largest: {} {:.1f} MiB)",
      m.step, max_steps, clock, m.loss, m.lr, m.grad_norm, m.samples_per_sec, m.tokens_per_sec, m.step_ms,
      m.gflops_per_sec, double(m.peak_tensor_bytes) / (1 << 20), double(m.max_rss_bytes) / (1 << 20),
      memory::category_name(m.peak_mem_group), double(m.peak_mem_group_bytes) / (1 << 20));
  if (m.aux_loss) line += fmt::format(" (ce {:.4f}, aux {:.4f})", *m.ce_loss, *m.aux_loss);
  if (m.z_loss) line += fmt::format(" | z_loss {:.4f}", *m.z_loss);
  if (!m.expert_imbalance.empty()) {
    const auto worst = std::max_element(m.expert_imbalance.begin(), m.expert_imbalance.end());
    line += fmt::format(" | expert load max/mean {:.2f} (layer {})", *worst, worst - m.expert_imbalance.begin());
    if (m.dropped) line += fmt::format(", dropped {}", *m.dropped);
    if (m.all_to_all_ms) line += fmt::format(", all-to-all {:.1f} ms", *m.all_to_all_ms);
  }
  if (m.mfu) line += fmt::format(" | MFU {:.1f}%", 100.0 * *m.mfu);
  if (m.loss_scale) line += fmt::format(" | loss scale {:g}", *m.loss_scale);
  if (m.skipped) line += " | step skipped (inf/NaN gradients)";
  if (m.tensor_parallel > 1 || m.expert_parallel > 1) line += fmt::format(" | mesh {}", m.mesh);
  if (m.world_size > 1) {
    line += fmt::format(" | comm {:.2f} MiB, wait {:.1f} ms ({:.0f}%)", double(m.comm_bytes) / (1 << 20),
                        m.comm_wait_ms, m.step_ms > 0 ? 100.0 * m.comm_wait_ms / m.step_ms : 0.0);
  }
  if (m.val_loss) line += fmt::format(" | val_loss {:.4f}", *m.val_loss);
  return line;
}

std::string to_json_line(const StepMetrics& m) {
  nlohmann::ordered_json j;
  j["step"] = m.step;
  j["loss"] = m.loss;
  j["lr"] = m.lr;
  j["grad_norm"] = m.grad_norm;
  j["samples_per_sec"] = m.samples_per_sec;
  j["tokens_per_sec"] = m.tokens_per_sec;
  j["step_ms"] = m.step_ms;
  j["gflops_per_sec"] = m.gflops_per_sec;
  j["tokens"] = m.tokens;
  j["trained_tokens"] = m.trained_tokens;
  j["tokens_seen"] = m.tokens_seen;
  j["peak_mem_bytes"] = m.peak_tensor_bytes;
  j["peak_mem_category"] = memory::category_name(m.peak_mem_group);
  j["peak_mem_category_bytes"] = m.peak_mem_group_bytes;
  j["max_rss_bytes"] = m.max_rss_bytes;
  j["comm_bytes"] = m.comm_bytes;
  j["comm_wait_ms"] = m.comm_wait_ms;
  j["world_size"] = m.world_size;
  if (!m.mesh.empty()) j["mesh"] = m.mesh;
  j["data_wait_ms"] = m.data_wait_ms;
  j["elapsed_s"] = m.elapsed_s;
  if (m.val_loss) j["val_loss"] = *m.val_loss;
  if (m.ce_loss) j["ce_loss"] = *m.ce_loss;
  if (m.aux_loss) j["aux_loss"] = *m.aux_loss;
  if (m.z_loss) j["z_loss"] = *m.z_loss;
  if (!m.expert_load.empty()) {
    j["expert_load"] = m.expert_load;
    j["expert_imbalance"] = m.expert_imbalance;
    if (m.dropped) j["dropped"] = *m.dropped;
    if (m.all_to_all_ms) j["all_to_all_ms"] = *m.all_to_all_ms;
  }
  if (m.mfu) j["mfu"] = *m.mfu;
  if (m.loss_scale) j["loss_scale"] = *m.loss_scale;
  if (m.skipped) j["skipped"] = true;
  if (!m.run_id.empty()) j["run_id"] = m.run_id;
  return j.dump();
}

void truncate_metrics_after(const std::string& path, int64_t step) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return;
  // A regular file only: a FIFO here once blocked the resumed run (and its SIGTERM) forever.
  std::istringstream in(read_regular_file(path));
  std::string kept, line;
  bool dropped = false;
  while (std::getline(in, line)) {
    int64_t s = -1;
    try {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("step")) s = j["step"].get<int64_t>();
    } catch (const nlohmann::json::exception&) {
    }
    if (s > step) {
      dropped = true;
      continue;
    }
    kept += line + "\n";
  }
  if (!dropped) return;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kept;
    out.flush();
    FSDP_CHECK(out.good(), "cannot write {}: {}", tmp, std::strerror(errno));
  }
  FSDP_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename {} to {}: {}", tmp, path,
             std::strerror(errno));
}

MetricsWriter::MetricsWriter(const std::string& path, bool truncate) : path_(path) {
  try {
    f_ = open_regular_file_stream(path, truncate ? "w" : "a");
  } catch (const Error& e) {
    FSDP_FAIL("cannot open metrics file: {}", e.what());
  }
}

MetricsWriter::~MetricsWriter() {
  if (f_ != nullptr) std::fclose(f_);
}

void MetricsWriter::write(const StepMetrics& m) {
  if (f_ == nullptr) return;
  const std::string line = to_json_line(m) + "\n";
  FSDP_CHECK(std::fwrite(line.data(), 1, line.size(), f_) == line.size() && std::fflush(f_) == 0,
             "cannot write metrics file {}: {}", path_, std::strerror(errno));
}

}  // namespace fsdp::obs
