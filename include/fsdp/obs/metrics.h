// Step metrics: one rank-0 log line per `train.log_every` steps and the same fields as one
// JSON object per line in <run.dir>/metrics.jsonl (stable field names: step, loss, lr,
// grad_norm, tokens_per_sec, and val_loss when evaluated; mfu on a GPU; loss_scale and
// skipped under float16; mesh (replicate x shard x tensor); ce_loss, aux_loss and, with a z-loss, z_loss for a mixture of
// experts; peak_mem_category and its bytes, rank 0's; run_id on every line, so a reader line
// by line always knows which run a step belongs to, with no header line to skip).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "fsdp/core/memory_category.h"

namespace fsdp::obs {

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double step_ms = 0;
  double samples_per_sec = 0;
  double tokens_per_sec = 0;
  double gflops_per_sec = 0;    // achieved model FLOP/s (6N + attention per token)
  int64_t tokens = 0;           // tokens in this step's global batch
  int64_t trained_tokens = 0;   // of them, targets that carry loss (all but masked ones)
  int64_t tokens_seen = 0;      // since the start of training
  uint64_t peak_tensor_bytes = 0;  // allocator peak since the last step's report
  // The category group (fsdp/core/memory_category.h) holding the most bytes at the step's
  // peak of memory in use, and those bytes (Allocator::peak_top_group).
  memory::Category peak_mem_group = memory::kOther;
  uint64_t peak_mem_group_bytes = 0;
  uint64_t max_rss_bytes = 0;      // process peak resident set size
  uint64_t comm_bytes = 0;         // bytes this rank sent in collectives during the step
  double comm_wait_ms = 0;         // time this rank spent waiting on collectives
  double data_wait_ms = 0;         // time the step waited for the loader
  int world_size = 1;
  // The device mesh, replicate x shard x tensor ("1x2x2"; dist/mesh.h), and its tensor
  // degree: the step line names the mesh under tensor parallelism, metrics.jsonl always.
  std::string mesh;
  int tensor_parallel = 1;
  int expert_parallel = 1;  // parallel.expert: the step line names the mesh under it too
  // Wall time since this process's first step, and the estimate of what the remaining steps
  // take at the mean pace so far (none before a step has been timed).
  double elapsed_s = 0;
  std::optional<double> eta_s;
  std::optional<double> val_loss;
  // A mixture of experts: loss = ce_loss + router_aux_loss_coef * aux_loss (+ z-loss term).
  std::optional<double> ce_loss, aux_loss, z_loss;
  // A mixture of experts: (token, choice) pairs per expert per layer over the step, all
  // ranks; and each layer's max/mean of them (1 = balanced).
  std::vector<std::vector<int64_t>> expert_load;
  std::vector<double> expert_imbalance;
  // moe.capacity_factor only: the (token, choice) pairs dropped over their expert's
  // capacity this step, every layer, micro-batch and rank.
  std::optional<int64_t> dropped;
  // Expert parallelism only: this rank's wait in the expert group's collectives (the tokens'
  // all-to-alls and their counts), part of comm_wait_ms.
  std::optional<double> all_to_all_ms;
  std::optional<double> mfu;         // on a GPU whose peak is known (obs/device_peak.h): 0..1
  std::optional<double> loss_scale;  // float16 compute: the dynamic loss scale this step ran with
  bool skipped = false;              // float16: inf/NaN gradients, the optimizer did not step
  std::string run_id;                // the run (Note [Run ownership] in run_ownership.h); "" = not written
};

std::string format_step_line(const StepMetrics& m, int64_t max_steps);
// "42 s", "12:05", "3:04:05": a duration as the step line prints it.
std::string format_duration(double seconds);
std::string to_json_line(const StepMetrics& m);

// Keeps only the lines of a metrics.jsonl whose "step" is <= `step` (tmp + rename), so a
// run resumed from a checkpoint at `step` does not leave the killed run's later steps in
// the file. A missing file is fine; a line that is not JSON is kept.
void truncate_metrics_after(const std::string& path, int64_t step);

// Appends JSON lines to a file, flushed per line so a killed job keeps what it logged.
class MetricsWriter {
 public:
  MetricsWriter() = default;
  // truncate: start a new file (a fresh run) instead of appending (a resumed run).
  MetricsWriter(const std::string& path, bool truncate);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const StepMetrics& m);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

}  // namespace fsdp::obs
