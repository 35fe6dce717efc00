// Note [Checkpoint commit]
// A save is three phases, all ranks at the same step:
//   1. start:  rank 0 clears a stale step_N.tmp/ (a crashed earlier attempt) and creates
//              it; barrier.
//   2. write:  every rank that owns a distinct shard writes rank_<r>.safetensors into it
//              (tmp + fsync + rename), on the calling thread or, asynchronously, on a
//              background thread from a snapshot.
//   3. commit: an all-gather of (wrote, ok, crc, bytes) per rank; if all are ok, rank 0
//              reads the files' headers (their tensors carry the global offsets), writes
//              manifest.json, renames step_N.tmp -> step_N, fsyncs the parent and prunes
//              beyond keep_last; a final all-reduce tells every rank whether that worked.
// A crash before the rename leaves only step_N.tmp (never resumed from, removed by the
// next save); after it, a complete checkpoint. Resume also re-verifies sizes and CRCs,
// so a checkpoint damaged later (a truncated or flipped file) is skipped, not trusted.
#include "fsdp/ckpt/checkpoint_writer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <system_error>
#include <thread>

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "fsdp/ckpt/checkpoint_reader.h"
#include "fsdp/ckpt/safetensors.h"
#include "fsdp/core/error.h"
#include "fsdp/core/memory_category.h"
#include "fsdp/core/trace.h"
#include "durable_file.h"
#include "rank_verdict.h"
#if defined(FSDP_WITH_CUDA)
#include "fsdp/core/cuda.h"
#endif

namespace fsdp::ckpt {

namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string rank_file_name(int rank) { return fmt::format("rank_{:05d}.safetensors", rank); }

// Removes a directory tree without ever leaving a partial tree under a checkpoint's name.
void remove_checkpoint_dir(const fs::path& dir) {
  const fs::path doomed = dir.string() + ".deleting";
  std::error_code ec;
  fs::remove_all(doomed, ec);
  fs::rename(dir, doomed, ec);
  if (ec) {
    spdlog::warn("cannot remove old checkpoint {}: {}", dir.string(), ec.message());
    return;
  }
  fs::remove_all(doomed, ec);
  if (ec) spdlog::warn("cannot remove {}: {}", doomed.string(), ec.message());
}

// The snapshot copy is the step loop's whole stall under async saves: spread it over the
// cores in 1 MiB blocks.
void parallel_copy(const Tensor& dst, const Tensor& src) {
  constexpr int64_t kBlock = (int64_t{1} << 20) / int64_t(sizeof(float));
  const float* s = src.data<float>();
  float* d = dst.data<float>();
  const int64_t n = src.numel(), blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t at = b * kBlock;
    std::memcpy(d + at, s + at, size_t(std::min(kBlock, n - at)) * sizeof(float));
  }
}

}  // namespace

struct CheckpointWriter::Job {
  int64_t step = 0;
  fs::path tmp_dir, final_dir;
  CheckpointMeta meta;
  const std::vector<UnitShard>* shards = nullptr;
  bool writes = false;  // this rank owns a distinct shard
  // Results (read after done).
  std::atomic<bool> done{false};
  std::string error;
  WrittenFile file;
  double write_seconds = 0, stall_seconds = 0;
  std::thread thread;
};

CheckpointWriter::CheckpointWriter(dist::ProcessGroups& groups, WriterOptions options)
    : groups_(groups), opt_(std::move(options)) {
  status_ = Tensor::zeros({int64_t(groups_.world->size()) * RankWriteStatus::kSlots}, DType::F64);
}

CheckpointWriter::~CheckpointWriter() {
  if (job_ && job_->thread.joinable()) job_->thread.join();
}

bool CheckpointWriter::local_busy() const { return job_ && !job_->done.load(std::memory_order_acquire); }

namespace {

// Elements [at, at + extent) of a rank's shard stored as elements [begin, begin + extent)
// of the whole (one-process) unit `unit`.
struct WholeRun {
  std::string unit;
  int64_t begin = 0, at = 0, extent = 0;
};

// Unit u's elements [begin, begin + n) as runs of one process's units (expert parallelism:
// a block without its experts, an expert unit inside its block; ParamSlot::whole_offset),
// adjacent runs merged. Under tensor parallelism too (`stored` not empty) the runs are of
// this tensor rank's units without expert parallelism (`stored`, its slices of one
// process's units: what format_version 2 stores per tensor rank), each slot at its offset
// there.
std::vector<WholeRun> whole_runs(const std::vector<model::UnitLayout>& units, int u, int64_t begin, int64_t n,
                                 const std::vector<model::UnitLayout>& stored) {
  const model::UnitLayout& unit = units[size_t(u)];
  const int of = unit.experts_of >= 0 ? unit.experts_of : u;
  const std::string& whole = units[size_t(of)].name;
  std::vector<WholeRun> out;
  for (const model::ParamSlot& s : unit.params) {
    const int64_t lo = std::max(begin, s.offset), hi = std::min(begin + n, s.offset + s.numel);
    if (lo >= hi) continue;
    const int64_t where = stored.empty() ? s.whole_offset : stored[size_t(of)].slot(s.name).offset;
    const int64_t at = lo - begin, w = where + (lo - s.offset);
    if (!out.empty() && out.back().at + out.back().extent == at && out.back().begin + out.back().extent == w) {
      out.back().extent += hi - lo;
    } else {
      out.push_back(WholeRun{whole, w, at, hi - lo});
    }
  }
  return out;
}

}  // namespace

void CheckpointWriter::write_local(Job& job) {
  const auto t0 = std::chrono::steady_clock::now();
  const trace::Span span("checkpoint write", "checkpoint", "step", job.step);
  try {
    if (job.writes) {
      std::vector<WriteEntry> entries;
      std::map<std::string, std::string> metadata{{"format", std::string(kCheckpointFormat)},
                                                  {"step", std::to_string(job.step)},
                                                  {"rank", std::to_string(groups_.world->rank())}};
      // Which tensor rank's slices the file holds (manifest.h); absent without tensor parallelism.
      if (groups_.tensor != nullptr && groups_.tensor->size() > 1)
        metadata["tensor_rank"] = std::to_string(groups_.tensor->rank());
      const bool runs = job.meta.model.expert_units();
      // Experts under tensor parallelism: the runs are of this tensor rank's slices.
      std::vector<model::UnitLayout> stored;
      if (runs && job.meta.model.tensor_parallel > 1) {
        model::LlamaConfig one = job.meta.model;
        one.expert_parallel = 1;
        stored = model::llama_units(one, groups_.tensor->rank());
      }
      for (size_t u = 0; u < job.shards->size(); ++u) {
        const UnitShard& s = (*job.shards)[u];
        const model::UnitLayout& unit = job.meta.units[u];
        const int64_t extent = std::clamp<int64_t>(unit.numel - s.begin, 0, s.master.numel());
        if (extent == 0) continue;  // this rank's shard is all padding
        const Tensor* parts[] = {&s.master, &s.exp_avg, &s.exp_avg_sq};
        // One piece: the shard as it lies. Expert parallelism: a piece per run of the whole
        // unit (see manifest.h), named by the run.
        std::vector<WholeRun> pieces{WholeRun{unit.name, s.begin, 0, extent}};
        if (runs) pieces = whole_runs(job.meta.units, int(u), s.begin, extent, stored);
        for (const WholeRun& r : pieces) {
          const std::string name = runs ? r.unit + "@" + std::to_string(r.begin) : r.unit;
          metadata["begin." + name] = std::to_string(r.begin);
          for (int k = 0; k < 3; ++k) {
            entries.push_back(WriteEntry{state_tensor_name(name, kStateKinds[k]), "F32", {r.extent},
                                         parts[k]->data<float>() + r.at, size_t(r.extent) * sizeof(float)});
          }
        }
      }
      job.file = write_safetensors((job.tmp_dir / rank_file_name(groups_.world->rank())).string(), entries, metadata);
    }
  } catch (const std::exception& e) {
    job.error = e.what();
  }
  job.write_seconds = seconds_since(t0);
  job.done.store(true, std::memory_order_release);
}

void CheckpointWriter::start_tmp_dir(int64_t step) {
  const fs::path tmp = fs::path(opt_.dir) / (checkpoint_name(step) + ".tmp");
  std::string error;
  if (groups_.world->rank() == 0) {
    try {
      std::error_code ec;
      fs::create_directories(opt_.dir, ec);
      FSDP_CHECK(!ec, "cannot create checkpoint directory {}: {}", opt_.dir, ec.message());
      fs::remove_all(tmp, ec);  // a crashed earlier attempt at this step
      FSDP_CHECK(!ec, "cannot clear {}: {}", tmp.string(), ec.message());
      fs::create_directory(tmp, ec);
      FSDP_CHECK(!ec, "cannot create {}: {}", tmp.string(), ec.message());
      detail::fsync_dir(opt_.dir);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (detail::count_failures(!error.empty(), *groups_.world) != 0) {
    FSDP_CHECK(error.empty(), "checkpoint save at step {} failed: {}", step, error);
    FSDP_FAIL("checkpoint save at step {} failed on rank 0 (see its error)", step);
  }
}

// Host copies of the shards in buffers owned here (allocated at the first save, page-locked
// when the shards are on a GPU so the copy runs at the link's speed).
void CheckpointWriter::take_snapshot(const std::vector<UnitShard>& shards) {
  const trace::Span span("checkpoint snapshot", "checkpoint");
  const memory::CategoryScope tag("checkpoint/snapshot");
  if (snapshot_.size() != shards.size()) snapshot_.assign(shards.size(), UnitShard{});
  for (size_t u = 0; u < shards.size(); ++u) {
    UnitShard& dst = snapshot_[u];
    const UnitShard& src = shards[u];
    const int64_t n = src.master.numel();
    if (!dst.master.defined() || dst.master.numel() != n) {
      for (Tensor* t : {&dst.master, &dst.exp_avg, &dst.exp_avg_sq}) {
#if defined(FSDP_WITH_CUDA)
        *t = src.master.device().is_cpu() ? Tensor::empty({n}, DType::F32) : cuda::pinned_empty({n}, DType::F32);
#else
        *t = Tensor::empty({n}, DType::F32);
#endif
      }
    }
    dst.begin = src.begin;
    for (auto [d, s] : {std::pair{&dst.master, &src.master}, std::pair{&dst.exp_avg, &src.exp_avg},
                        std::pair{&dst.exp_avg_sq, &src.exp_avg_sq}}) {
      if (s->device().is_cpu()) {
        parallel_copy(*d, *s);
      } else {
        d->copy_(*s);  // device -> host: returns once the bytes are here
      }
    }
  }
}

SaveStats CheckpointWriter::save(const CheckpointMeta& meta, const std::vector<UnitShard>& shards) {
  finish();  // a previous asynchronous save commits first
  const trace::Span span("checkpoint save", "checkpoint", "step", meta.state.step);
  const auto t0 = std::chrono::steady_clock::now();
  FSDP_CHECK(shards.size() == meta.units.size(), "checkpoint: {} shards for {} units", shards.size(),
             meta.units.size());
  const int64_t step = meta.state.step;
  start_tmp_dir(step);
  job_ = std::make_unique<Job>();
  Job& job = *job_;
  job.step = step;
  job.tmp_dir = fs::path(opt_.dir) / (checkpoint_name(step) + ".tmp");
  job.final_dir = fs::path(opt_.dir) / checkpoint_name(step);
  job.meta = meta;
  job.writes = groups_.replicate->rank() == 0;
  pending_ = true;
  // Shards on a GPU are written from host copies; so are async saves (the step loop
  // goes on changing the shards). Only a sync save of host shards writes them in place.
  const bool on_device = !shards.empty() && !shards[0].master.device().is_cpu();
  const bool copy_first = opt_.async || on_device;
  if (copy_first) take_snapshot(shards);
  job.shards = copy_first ? &snapshot_ : &shards;
  if (!opt_.async) {
    write_local(job);
    job.stall_seconds = seconds_since(t0);
    SaveStats s = commit();
    s.stall_seconds = seconds_since(t0);
    return s;
  }
  job.stall_seconds = seconds_since(t0);
  try {
    job.thread = std::thread([this, &job] {
      trace::set_thread_name("checkpoint writer");
      write_local(job);
    });
  } catch (const std::system_error& e) {
    // No thread to spare (the process's thread limit): the snapshot is written here, now;
    // the commit still waits for the ranks' votes like any background save.
    spdlog::warn("checkpoint: cannot start the background writer ({}): writing step {} on the training thread",
                 e.code().message(), step);
    write_local(job);
  }
  SaveStats s;
  s.step = step;
  s.stall_seconds = job.stall_seconds;
  return s;
}

std::optional<SaveStats> CheckpointWriter::finish() {
  if (!pending_) return std::nullopt;
  if (job_->thread.joinable()) job_->thread.join();
  return commit();
}

void RankWriteStatus::encode(double* s) const {
  s[0] = wrote ? 1 : 0;
  s[1] = ok ? 1 : 0;
  s[2] = double(crc32);
  s[3] = double(bytes);  // exact below 2^53 bytes
}

RankWriteStatus RankWriteStatus::decode(const double* s) {
  return RankWriteStatus{s[0] != 0, s[1] != 0, uint32_t(s[2]), uint64_t(s[3])};
}

// Every rank's status, from one all-gather.
std::vector<RankWriteStatus> CheckpointWriter::gather_status(const Job& job) {
  dist::Communicator& world = *groups_.world;
  Tensor mine = Tensor::zeros({RankWriteStatus::kSlots}, DType::F64);
  RankWriteStatus{job.writes, job.error.empty(), job.file.crc32, job.file.bytes}.encode(mine.data<double>());
  world.wait(world.all_gather(mine, status_));
  std::vector<RankWriteStatus> all;
  for (int i = 0; i < world.size(); ++i) all.push_back(RankWriteStatus::decode(status_.data<double>() + i * RankWriteStatus::kSlots));
  return all;
}

// Rank 0: the manifest of the files the ranks wrote (their tensors carry the global
// offsets in the files' metadata; pieces sorted by offset).
Manifest CheckpointWriter::build_manifest(const Job& job, const std::vector<RankWriteStatus>& status) const {
  Manifest m;
  m.state = job.meta.state;
  m.model = job.meta.model;
  m.strategy = job.meta.strategy;
  m.world_size = int(status.size());
  m.shard_group_size = job.meta.shard_group_size;
  m.config_yaml = job.meta.config_yaml;
  m.run_id = job.meta.run_id;
  m.base = job.meta.base;
  m.tensor_parallel = int(job.meta.model.tensor_parallel);
  m.format_version = m.tensor_parallel > 1 ? 2 : 1;
  // Expert parallelism: one process's units, tiled by the ranks' named runs (manifest.h).
  // Each of one process's units is a block with every expert rank's experts: its own
  // elements and E times its expert unit's (plain or LoRA's: the rank's units say which).
  // With tensor parallelism too, each tensor rank's slices of them (its runs tile them), whose
  // slots the manifest lists: the plain model's (LoRA under both is refused at start-up).
  std::vector<model::UnitLayout> whole;
  if (job.meta.model.expert_units() && m.tensor_parallel > 1) {
    m.format_version = 3;
    model::LlamaConfig one = job.meta.model;
    one.expert_parallel = 1;
    whole = model::llama_units(one);
  } else if (job.meta.model.expert_units()) {
    m.format_version = 3;
    for (const model::UnitLayout& u : job.meta.units)
      if (u.experts_of < 0) whole.push_back(u);
    for (const model::UnitLayout& u : job.meta.units)
      if (u.experts_of >= 0) whole[size_t(u.experts_of)].numel += u.numel * job.meta.model.expert_parallel;
  }
  for (const model::UnitLayout& u : whole.empty() ? job.meta.units : whole) {
    ManifestUnit mu{u.name, u.numel, {}, {}};
    if (m.tensor_parallel > 1) {
      for (const model::ParamSlot& s : u.params)
        mu.slots.push_back(ManifestSlot{s.name, std::vector<int64_t>(s.shape.begin(), s.shape.end()), s.offset, s.tp.dim});
    }
    m.units.push_back(std::move(mu));
  }
  for (int i = 0; i < int(status.size()); ++i) {
    if (!status[size_t(i)].wrote) continue;
    const std::string name = rank_file_name(i);
    const int index = int(m.files.size());
    m.files.push_back(ManifestFile{name, status[size_t(i)].bytes, status[size_t(i)].crc32});
    const SafetensorsFile f((job.tmp_dir / name).string());
    const auto tensor_rank = f.metadata().find("tensor_rank");
    const int t = tensor_rank == f.metadata().end() ? 0 : std::stoi(tensor_rank->second);
    for (ManifestUnit& unit : m.units) {
      auto it = f.metadata().find("begin." + unit.name);
      if (it != f.metadata().end()) {
        unit.pieces.push_back(
            ManifestPiece{index, std::stoll(it->second), f.entry(state_tensor_name(unit.name, "master")).numel(), t, ""});
      }
      // Named runs, "<unit>@<begin>" (expert parallelism): the '@' ends the unit's name.
      const std::string named = "begin." + unit.name + "@";
      for (auto n = f.metadata().lower_bound(named); n != f.metadata().end() && n->first.rfind(named, 0) == 0; ++n) {
        const std::string tensor = n->first.substr(6);
        unit.pieces.push_back(
            ManifestPiece{index, std::stoll(n->second), f.entry(state_tensor_name(tensor, "master")).numel(), t, tensor});
      }
    }
  }
  for (ManifestUnit& unit : m.units) {
    std::sort(unit.pieces.begin(), unit.pieces.end(), [](const ManifestPiece& a, const ManifestPiece& b) {
      return std::pair(a.tensor_rank, a.begin) < std::pair(b.tensor_rank, b.begin);
    });
  }
  return m;
}

// Rank 0: manifest.json into the tmp directory, then the rename that makes the checkpoint
// exist, then the parent's fsync that makes the rename durable.
void CheckpointWriter::publish(const Job& job, const Manifest& manifest) const {
  detail::replace_file_durably(job.tmp_dir / kManifestFile, manifest_json(manifest));
  std::error_code ec;
  if (fs::exists(job.final_dir)) remove_checkpoint_dir(job.final_dir);  // a broken one of the same step
  fs::rename(job.tmp_dir, job.final_dir, ec);
  FSDP_CHECK(!ec, "cannot rename {} to {}: {}", job.tmp_dir.string(), job.final_dir.string(), ec.message());
  detail::fsync_dir(opt_.dir);
}

// Every rank: the save failed; rank 0 removes the tmp directory, and every rank throws one
// error naming the rank(s) at fault (its own message where it is one of them).
void CheckpointWriter::abandon(const Job& job, const std::string& local_error, const std::vector<int>& failed_ranks) {
  if (groups_.world->rank() == 0) {
    std::error_code ec;
    fs::remove_all(job.tmp_dir, ec);
  }
  if (!local_error.empty()) FSDP_FAIL("checkpoint save at step {} failed: {}", job.step, local_error);
  FSDP_FAIL("checkpoint save at step {} failed on rank(s) {} (see their errors); the previous checkpoints are "
            "untouched",
            job.step, fmt::join(failed_ranks, ", "));
}

// Rank 0: complete checkpoints beyond keep_last, and leftovers of crashed saves. The one
// just written always stays, whatever steps the others have (a directory holding a higher
// step than this run's would otherwise make rotation delete the new checkpoint at once;
// Note [Run ownership] in train/run_ownership.h keeps other runs out, this is the backstop).
void CheckpointWriter::prune(const std::string& just_written) const {
  const auto complete = list_checkpoints(opt_.dir);
  if (opt_.keep_last > 0) {
    int kept = 1;  // just_written
    for (const std::string& path : complete) {
      if (fs::path(path) == fs::path(just_written)) continue;
      if (kept < opt_.keep_last) {
        ++kept;
        continue;
      }
      remove_checkpoint_dir(path);
    }
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(opt_.dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("step_") && (name.ends_with(".tmp") || name.ends_with(".deleting"))) {
      fs::remove_all(entry.path(), ec);
    }
  }
}

SaveStats CheckpointWriter::commit() {
  const trace::Span span("checkpoint commit", "checkpoint");
  FSDP_CHECK(pending_, "checkpoint commit without a save");
  Job& job = *job_;
  if (job.thread.joinable()) job.thread.join();  // only reached once every rank reported done
  pending_ = false;
  dist::Communicator& world = *groups_.world;
  const std::vector<RankWriteStatus> status = gather_status(job);
  std::vector<int> failed;
  for (int i = 0; i < int(status.size()); ++i)
    if (!status[size_t(i)].ok) failed.push_back(i);
  if (!failed.empty()) {
    world.barrier();  // every rank must know the tmp directory is gone before anyone moves on
    abandon(job, job.error, failed);
  }
  std::string error;
  if (world.rank() == 0) {
    try {
      publish(job, build_manifest(job, status));
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // Only rank 0 publishes: if that failed, rank 0 is the one every rank names.
  if (detail::count_failures(!error.empty(), world) != 0) abandon(job, error, {0});
  if (world.rank() == 0) prune(job.final_dir.string());
  SaveStats s;
  s.step = job.step;
  s.stall_seconds = job.stall_seconds;
  s.write_seconds = job.write_seconds;
  s.bytes = job.file.bytes;
  s.path = job.final_dir.string();
  return s;
}

}  // namespace fsdp::ckpt
