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
#include "fsdp/ckpt/checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "fsdp/ckpt/safetensors.h"
#include "fsdp/core/error.h"
#include "durable_file.h"
#if defined(FSDP_WITH_CUDA)
#include "fsdp/core/cuda.h"
#endif

namespace fsdp::ckpt {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kManifest = "manifest.json";

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string rank_file_name(int rank) { return fmt::format("rank_{:05d}.safetensors", rank); }

std::string tensor_name(const std::string& unit, std::string_view kind) { return unit + "." + std::string(kind); }

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

json model_to_json(const model::LlamaConfig& m) {
  json j = {{"vocab_size", m.vocab_size},   {"hidden_size", m.hidden_size}, {"intermediate_size", m.intermediate_size},
            {"num_layers", m.num_layers},   {"num_heads", m.num_heads},     {"num_kv_heads", m.num_kv_heads},
            {"max_seq_len", m.max_seq_len}, {"rope_theta", m.rope_theta},   {"norm_eps", m.norm_eps}};
  // Written only for a mixture of experts, so a dense model's manifest is what it always was.
  if (m.is_moe()) {
    j["num_experts"] = m.num_experts;
    j["experts_per_token"] = m.experts_per_token;
    j["router_aux_loss_coef"] = m.router_aux_loss_coef;
    j["router_z_loss_coef"] = m.router_z_loss_coef;
  }
  return j;
}

model::LlamaConfig model_from_json(const json& j) {
  model::LlamaConfig m;
  m.vocab_size = j.at("vocab_size").get<int64_t>();
  m.hidden_size = j.at("hidden_size").get<int64_t>();
  m.intermediate_size = j.at("intermediate_size").get<int64_t>();
  m.num_layers = j.at("num_layers").get<int64_t>();
  m.num_heads = j.at("num_heads").get<int64_t>();
  m.num_kv_heads = j.at("num_kv_heads").get<int64_t>();
  m.max_seq_len = j.at("max_seq_len").get<int64_t>();
  m.rope_theta = j.at("rope_theta").get<double>();
  m.norm_eps = j.at("norm_eps").get<double>();
  m.num_experts = j.value("num_experts", int64_t{0});
  m.experts_per_token = j.value("experts_per_token", int64_t{0});
  m.router_aux_loss_coef = j.value("router_aux_loss_coef", 0.0);
  m.router_z_loss_coef = j.value("router_z_loss_coef", 0.0);
  return m;
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

uint32_t crc32_of_file(const std::string& path, uint64_t expect_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  FSDP_CHECK(fd >= 0, "cannot open {}: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || uint64_t(st.st_size) != expect_bytes) {
    ::close(fd);
    FSDP_FAIL("{}: size {} bytes, but the manifest records {} (truncated or replaced)", path, uint64_t(st.st_size),
              expect_bytes);
  }
  if (expect_bytes == 0) {
    ::close(fd);
    return 0;
  }
  void* map = ::mmap(nullptr, expect_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  FSDP_CHECK(map != MAP_FAILED, "cannot map {}: {}", path, std::strerror(errno));
  ::madvise(map, expect_bytes, MADV_SEQUENTIAL);
  const uint32_t crc = crc32_parallel(map, expect_bytes);
  ::munmap(map, expect_bytes);
  return crc;
}

}  // namespace

std::string checkpoint_name(int64_t step) { return "step_" + std::to_string(step); }

// ---------------------------------------------------------------- reading

struct CheckpointReader::OpenFiles {
  std::map<int, std::unique_ptr<SafetensorsFile>> files;
};

CheckpointReader::CheckpointReader(const std::string& dir) : dir_(dir), open_(std::make_unique<OpenFiles>()) {
  const fs::path path = fs::path(dir) / kManifest;
  std::ifstream in(path);
  FSDP_CHECK(in.good(), "{}: no manifest (not a checkpoint, or one whose save never completed)", path.string());
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    FSDP_FAIL("{}: not valid JSON: {}", path.string(), e.what());
  }
  Manifest& m = manifest_;
  try {
    FSDP_CHECK(j.value("format", std::string()) == kCheckpointFormat, "{}: not an fsdp_train checkpoint manifest",
               path.string());
    m.format_version = j.at("format_version").get<int>();
    FSDP_CHECK(m.format_version >= 1 && m.format_version <= kCheckpointFormatVersion,
               "{}: format_version {} was written by a newer fsdp_train; this build reads versions up to {}",
               path.string(), m.format_version, kCheckpointFormatVersion);
    const json& st = j.at("state");
    m.state.step = st.at("step").get<int64_t>();
    m.state.tokens_seen = st.at("tokens_seen").get<int64_t>();
    m.state.samples_seen = st.at("samples_seen").get<int64_t>();
    m.state.train_seed = st.at("train_seed").get<uint64_t>();
    m.state.data_seed = st.at("data_seed").get<uint64_t>();
    m.state.loss_scale = st.value("loss_scale", 0.0);
    m.state.loss_scale_good_steps = st.value("loss_scale_good_steps", int64_t{0});
    m.state.skipped_steps = st.value("skipped_steps", int64_t{0});
    m.model = model_from_json(j.at("model"));
    m.strategy = j.at("strategy").get<std::string>();
    m.world_size = j.at("world_size").get<int>();
    m.shard_group_size = j.at("shard_group_size").get<int>();
    m.config_yaml = j.value("config", std::string());
    for (const json& f : j.at("files")) {
      m.files.push_back({f.at("name").get<std::string>(), f.at("bytes").get<uint64_t>(), f.at("crc32").get<uint32_t>()});
    }
    for (const json& u : j.at("units")) {
      ManifestUnit mu;
      mu.name = u.at("name").get<std::string>();
      mu.numel = u.at("numel").get<int64_t>();
      for (const json& p : u.at("pieces")) {
        mu.pieces.push_back({p.at("file").get<int>(), p.at("begin").get<int64_t>(), p.at("extent").get<int64_t>()});
      }
      m.units.push_back(std::move(mu));
    }
  } catch (const json::exception& e) {
    FSDP_FAIL("{}: malformed manifest: {}", path.string(), e.what());
  }
  // Structure: pieces tile [0, numel) of every unit and point at listed files.
  for (const ManifestUnit& u : m.units) {
    int64_t next = 0;
    for (const ManifestPiece& p : u.pieces) {
      FSDP_CHECK(p.file >= 0 && p.file < int(m.files.size()), "{}: unit {} names file #{}, which is not listed",
                 path.string(), u.name, p.file);
      FSDP_CHECK(p.begin == next && p.extent > 0, "{}: unit {} pieces do not tile its {} elements (gap or overlap at {})",
                 path.string(), u.name, u.numel, next);
      next += p.extent;
    }
    FSDP_CHECK(next == u.numel, "{}: unit {} pieces cover {} of its {} elements", path.string(), u.name, next, u.numel);
  }
  for (const ManifestFile& f : m.files) {
    const fs::path fp = fs::path(dir) / f.name;
    std::error_code ec;
    const auto size = fs::file_size(fp, ec);
    FSDP_CHECK(!ec, "{}: missing ({}); the checkpoint is incomplete", fp.string(), ec.message());
    FSDP_CHECK(size == f.bytes, "{}: size {} bytes, but the manifest records {} (truncated or replaced)", fp.string(),
               size, f.bytes);
  }
}

CheckpointReader::~CheckpointReader() = default;

void CheckpointReader::verify_file(int i) const {
  const ManifestFile& f = manifest_.files.at(size_t(i));
  const std::string path = (fs::path(dir_) / f.name).string();
  const uint32_t crc = crc32_of_file(path, f.bytes);
  FSDP_CHECK(crc == f.crc32, "{}: CRC-32 {:08x} does not match the manifest's {:08x} (the file is corrupt)", path, crc,
             f.crc32);
}

void CheckpointReader::verify() const {
  for (int i = 0; i < int(manifest_.files.size()); ++i) verify_file(i);
}

void CheckpointReader::check_model(const model::LlamaConfig& cfg, const std::vector<model::UnitLayout>& units) const {
  const model::LlamaConfig& m = manifest_.model;
  auto same = [&](int64_t have, int64_t want, const char* key) {
    FSDP_CHECK(have == want,
               "checkpoint {} holds a model with {} = {}, but the config asks for {} (model.{}): it is a checkpoint "
               "of a different model; point checkpoint.dir / checkpoint.load_dir elsewhere or set "
               "checkpoint.resume: none",
               dir_, key, have, want, key);
  };
  same(m.vocab_size, cfg.vocab_size, "vocab_size");
  same(m.hidden_size, cfg.hidden_size, "hidden_size");
  same(m.intermediate_size, cfg.intermediate_size, "intermediate_size");
  same(m.num_layers, cfg.num_layers, "num_layers");
  same(m.num_heads, cfg.num_heads, "num_heads");
  same(m.num_kv_heads, cfg.num_kv_heads, "num_kv_heads");
  same(m.num_experts, cfg.num_experts, "num_experts");
  same(m.experts_per_token, cfg.experts_per_token, "experts_per_token");
  FSDP_CHECK(manifest_.units.size() == units.size(), "checkpoint {} has {} parameter units, the model {}", dir_,
             manifest_.units.size(), units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    FSDP_CHECK(manifest_.units[u].name == units[u].name && manifest_.units[u].numel == units[u].numel,
               "checkpoint {}: unit {} is '{}' with {} elements, the model's is '{}' with {}", dir_, u,
               manifest_.units[u].name, manifest_.units[u].numel, units[u].name, units[u].numel);
  }
}

void CheckpointReader::read(int unit, std::string_view kind, int64_t begin, const Tensor& out) const {
  FSDP_CHECK(unit >= 0 && unit < int(manifest_.units.size()), "checkpoint {}: no unit {}", dir_, unit);
  FSDP_CHECK(out.dtype() == DType::F32 && out.is_contiguous() && out.device().is_cpu(),
             "checkpoint read needs a contiguous float32 CPU tensor");
  const ManifestUnit& u = manifest_.units[size_t(unit)];
  float* dst = out.data<float>();
  const int64_t n = out.numel(), end = begin + n;
  std::fill(dst, dst + n, 0.0f);
  const std::string name = tensor_name(u.name, kind);
  for (const ManifestPiece& p : u.pieces) {
    const int64_t lo = std::max(begin, p.begin), hi = std::min(end, p.begin + p.extent);
    if (lo >= hi) continue;
    auto& file = open_->files[p.file];
    if (!file) file = std::make_unique<SafetensorsFile>((fs::path(dir_) / manifest_.files[size_t(p.file)].name).string());
    const TensorEntry& e = file->entry(name);
    FSDP_CHECK(e.dtype == "F32" && e.numel() == p.extent, "{}: tensor {} is {} of {} elements, expected F32 of {}",
               file->path(), name, e.dtype, e.numel(), p.extent);
    std::memcpy(dst + (lo - begin), e.data + size_t(lo - p.begin) * sizeof(float), size_t(hi - lo) * sizeof(float));
  }
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("step_") || !entry.is_directory()) continue;
    int64_t step = -1;
    const char* b = name.data() + 5;
    const char* e = name.data() + name.size();
    auto [p, err] = std::from_chars(b, e, step);
    if (err != std::errc() || p != e || step < 0) continue;  // step_N.tmp, step_N.deleting, ...
    found.emplace_back(step, entry.path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

bool is_checkpoint_dir(const std::string& dir) {
  std::ifstream in(fs::path(dir) / kManifest);
  if (!in.good()) return false;
  try {
    return json::parse(in).value("format", std::string()) == kCheckpointFormat;
  } catch (const json::exception&) {
    return false;
  }
}

namespace {

// Every rank checks its share of a checkpoint (open on all, CRC of files i % world ==
// rank); returns this rank's failure message, "" if none.
std::string check_share(const std::string& path, const dist::Communicator& world) {
  try {
    const CheckpointReader reader(path);
    for (int i = world.rank(); i < int(reader.manifest().files.size()); i += world.size()) reader.verify_file(i);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// All-reduce of a failure count; every rank gets the same verdict.
int count_failures(bool failed, dist::Communicator& world) {
  Tensor t = Tensor::zeros({1}, DType::F64);
  t.data<double>()[0] = failed ? 1.0 : 0.0;
  world.wait(world.all_reduce(t));
  return int(t.data<double>()[0]);
}

}  // namespace

std::string find_latest_checkpoint(const std::string& dir, dist::Communicator& world) {
  // Rank 0's listing decides (a shared filesystem may show ranks slightly different views).
  std::vector<std::string> candidates = list_checkpoints(dir);
  Tensor count = Tensor::zeros({1}, DType::F64);
  count.data<double>()[0] = double(candidates.size());
  world.wait(world.broadcast(count, 0));
  const int n = int(count.data<double>()[0]);
  Tensor steps = Tensor::zeros({std::max(n, 1)}, DType::F64);
  if (world.rank() == 0) {
    for (int i = 0; i < n; ++i) {
      const std::string name = fs::path(candidates[size_t(i)]).filename().string();
      steps.data<double>()[i] = double(std::stoll(name.substr(5)));
    }
  }
  world.wait(world.broadcast(steps, 0));
  for (int i = 0; i < n; ++i) {
    const std::string path = (fs::path(dir) / checkpoint_name(int64_t(steps.data<double>()[i]))).string();
    const std::string why = check_share(path, world);
    if (!why.empty()) spdlog::warn("skipping checkpoint {}: {}", path, why);
    if (count_failures(!why.empty(), world) == 0) return path;
    if (why.empty() && world.rank() == 0) spdlog::warn("skipping checkpoint {}: another rank could not verify it", path);
  }
  return "";
}

void verify_checkpoint(const std::string& path, dist::Communicator& world) {
  const std::string why = check_share(path, world);
  if (count_failures(!why.empty(), world) == 0) return;
  FSDP_CHECK(why.empty(), "cannot resume from {}: {}", path, why);
  FSDP_FAIL("cannot resume from {}: another rank could not verify it (see its error)", path);
}

// ---------------------------------------------------------------- writing

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
  status_ = Tensor::zeros({int64_t(groups_.world->size()) * 4}, DType::F64);
}

CheckpointWriter::~CheckpointWriter() {
  if (job_ && job_->thread.joinable()) job_->thread.join();
}

bool CheckpointWriter::local_busy() const { return job_ && !job_->done.load(std::memory_order_acquire); }

void CheckpointWriter::write_local(Job& job) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    if (job.writes) {
      std::vector<WriteEntry> entries;
      std::map<std::string, std::string> metadata{{"format", std::string(kCheckpointFormat)},
                                                  {"step", std::to_string(job.step)},
                                                  {"rank", std::to_string(groups_.world->rank())}};
      for (size_t u = 0; u < job.shards->size(); ++u) {
        const UnitShard& s = (*job.shards)[u];
        const model::UnitLayout& unit = job.meta.units[u];
        const int64_t extent = std::clamp<int64_t>(unit.numel - s.begin, 0, s.master.numel());
        if (extent == 0) continue;  // this rank's shard is all padding
        metadata["begin." + unit.name] = std::to_string(s.begin);
        const Tensor* parts[] = {&s.master, &s.exp_avg, &s.exp_avg_sq};
        for (int k = 0; k < 3; ++k) {
          entries.push_back(WriteEntry{tensor_name(unit.name, kStateKinds[k]), "F32", {extent},
                                       parts[k]->data<float>(), size_t(extent) * sizeof(float)});
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
  if (count_failures(!error.empty(), *groups_.world) != 0) {
    FSDP_CHECK(error.empty(), "checkpoint save at step {} failed: {}", step, error);
    FSDP_FAIL("checkpoint save at step {} failed on rank 0 (see its error)", step);
  }
}

// Host copies of the shards in buffers owned here (allocated at the first save, page-locked
// when the shards are on a GPU so the copy runs at the link's speed).
void CheckpointWriter::take_snapshot(const std::vector<UnitShard>& shards) {
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
  job.thread = std::thread([this, &job] { write_local(job); });
  SaveStats s;
  s.step = step;
  s.stall_seconds = job.stall_seconds;
  return s;
}

void CheckpointWriter::finish() {
  if (!pending_) return;
  if (job_->thread.joinable()) job_->thread.join();
  commit();
}

SaveStats CheckpointWriter::commit() {
  FSDP_CHECK(pending_, "checkpoint commit without a save");
  Job& job = *job_;
  if (job.thread.joinable()) job.thread.join();  // only reached once every rank reported done
  pending_ = false;
  dist::Communicator& world = *groups_.world;
  const int W = world.size(), r = world.rank();
  Tensor mine = Tensor::zeros({4}, DType::F64);
  double* m = mine.data<double>();
  m[0] = job.writes ? 1 : 0;
  m[1] = job.error.empty() ? 1 : 0;
  m[2] = double(job.file.crc32);
  m[3] = double(job.file.bytes);
  world.wait(world.all_gather(mine, status_));
  const double* all = status_.data<double>();
  std::vector<int> failed;
  for (int i = 0; i < W; ++i)
    if (all[4 * i + 1] == 0) failed.push_back(i);

  auto fail = [&](const std::string& local_error) {
    if (r == 0) {
      std::error_code ec;
      fs::remove_all(job.tmp_dir, ec);
    }
    if (!local_error.empty()) FSDP_FAIL("checkpoint save at step {} failed: {}", job.step, local_error);
    FSDP_FAIL("checkpoint save at step {} failed on rank(s) {} (see their errors); the previous checkpoints are "
              "untouched",
              job.step, fmt::join(failed, ", "));
  };
  if (!failed.empty()) {
    // Every rank must know the tmp directory is gone before anyone moves on.
    world.barrier();
    fail(job.error);
  }

  std::string error;
  if (r == 0) {
    try {
      json files = json::array(), units = json::array();
      std::vector<std::vector<json>> pieces(job.meta.units.size());
      for (int i = 0; i < W; ++i) {
        if (all[4 * i] == 0) continue;
        const std::string name = rank_file_name(i);
        const int index = int(files.size());
        files.push_back({{"name", name}, {"bytes", uint64_t(all[4 * i + 3])}, {"crc32", uint32_t(all[4 * i + 2])}});
        const SafetensorsFile f((job.tmp_dir / name).string());
        for (size_t u = 0; u < job.meta.units.size(); ++u) {
          const std::string& unit = job.meta.units[u].name;
          auto it = f.metadata().find("begin." + unit);
          if (it == f.metadata().end()) continue;
          const int64_t begin = std::stoll(it->second);
          const int64_t extent = f.entry(tensor_name(unit, "master")).numel();
          pieces[u].push_back({{"file", index}, {"begin", begin}, {"extent", extent}});
        }
      }
      for (size_t u = 0; u < job.meta.units.size(); ++u) {
        std::sort(pieces[u].begin(), pieces[u].end(),
                  [](const json& a, const json& b) { return a["begin"].get<int64_t>() < b["begin"].get<int64_t>(); });
        units.push_back({{"name", job.meta.units[u].name}, {"numel", job.meta.units[u].numel}, {"pieces", pieces[u]}});
      }
      const TrainState& st = job.meta.state;
      json manifest = {{"format", kCheckpointFormat},
                       {"format_version", kCheckpointFormatVersion},
                       {"state",
                        {{"step", st.step},
                         {"tokens_seen", st.tokens_seen},
                         {"samples_seen", st.samples_seen},
                         {"train_seed", st.train_seed},
                         {"data_seed", st.data_seed},
                         {"loss_scale", st.loss_scale},
                         {"loss_scale_good_steps", st.loss_scale_good_steps},
                         {"skipped_steps", st.skipped_steps}}},
                       {"model", model_to_json(job.meta.model)},
                       {"strategy", job.meta.strategy},
                       {"world_size", W},
                       {"shard_group_size", job.meta.shard_group_size},
                       {"files", files},
                       {"units", units},
                       {"config", job.meta.config_yaml}};
      detail::replace_file_durably(job.tmp_dir / kManifest, manifest.dump(1));
      std::error_code ec;
      if (fs::exists(job.final_dir)) remove_checkpoint_dir(job.final_dir);  // a broken one of the same step
      fs::rename(job.tmp_dir, job.final_dir, ec);
      FSDP_CHECK(!ec, "cannot rename {} to {}: {}", job.tmp_dir.string(), job.final_dir.string(), ec.message());
      detail::fsync_dir(opt_.dir);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (count_failures(!error.empty(), world) != 0) fail(error);

  if (r == 0) {
    // Prune: complete checkpoints beyond keep_last, and leftovers of crashed saves.
    const auto complete = list_checkpoints(opt_.dir);
    if (opt_.keep_last > 0) {
      for (size_t i = size_t(opt_.keep_last); i < complete.size(); ++i) remove_checkpoint_dir(complete[i]);
    }
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(opt_.dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.starts_with("step_") && (name.ends_with(".tmp") || name.ends_with(".deleting"))) {
        fs::remove_all(entry.path(), ec);
      }
    }
  }
  SaveStats s;
  s.step = job.step;
  s.stall_seconds = job.stall_seconds;
  s.write_seconds = job.write_seconds;
  s.bytes = job.file.bytes;
  s.path = job.final_dir.string();
  return s;
}

}  // namespace fsdp::ckpt
