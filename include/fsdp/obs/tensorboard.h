// logging.tensorboard: rank 0 writes every scalar of metrics.jsonl, at every step, to
// <run.dir>/tensorboard/events.out.tfevents.<unix time>.<host> (a TFRecord file of Event
// protos: tfrecord.h, tf_event.h), which `tensorboard --logdir <run.dir>/tensorboard` reads.
//
// Tags: <group>/<field>, the field being metrics.jsonl's name: loss/{loss,val_loss,ce_loss,
// aux_loss,z_loss}, optim/{lr,grad_norm,loss_scale,skipped}, throughput/{samples_per_sec,
// tokens_per_sec,step_ms,gflops_per_sec,mfu}, data/{tokens,tokens_seen,data_wait_ms},
// memory/{peak_mem_bytes,max_rss_bytes,peak_mem_category_bytes}, comm/{comm_bytes,
// comm_wait_ms,world_size}, moe/expert_imbalance/layer_<l> and moe/expert_load/layer_<l>/
// expert_<e>; a field not in that list goes to other/<field>. Values are float32
// (Summary.Value.simple_value, what torch's SummaryWriter.add_scalar writes); true = 1.
//
// One curve across restarts: every run opens a new file (names sort by time, the order
// TensorBoard reads a directory in) that starts with a SessionLog START at the run's first
// step, as torch's SummaryWriter(purge_step=...) does, so TensorBoard drops what earlier
// files logged from that step on: the steps a killed run logged after its checkpoint, or
// a whole earlier run when this one starts over in the same run.dir.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "fsdp/obs/metrics.h"

namespace fsdp::obs {

// (tag, value) of every scalar to_json_line(m) holds, in its order.
std::vector<std::pair<std::string, float>> tensorboard_scalars(const StepMetrics& m);

class TensorBoardWriter {
 public:
  // Creates `dir` and a new event file in it, starting with the file version and a restart
  // at `first_step`. Throws fsdp::Error naming the file when it cannot.
  TensorBoardWriter(const std::string& dir, int64_t first_step);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Appends step m.step's scalars and flushes (a killed job keeps what it logged).
  void write(const StepMetrics& m);
  const std::string& path() const { return path_; }

 private:
  void append(const std::string& event);

  std::string path_;
  std::FILE* f_ = nullptr;
};

}  // namespace fsdp::obs
