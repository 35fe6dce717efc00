// Reading checkpoints; see checkpoint_reader.h, and manifest.h for the layout.
#include "fsdp/ckpt/checkpoint_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <map>

#include <spdlog/spdlog.h>
#include <zlib.h>

#include "fsdp/ckpt/safetensors.h"
#include "fsdp/core/error.h"
#include "fsdp/core/regular_file.h"
#include "rank_verdict.h"

namespace fsdp::ckpt {

namespace fs = std::filesystem;

namespace {

// What one pass over a rank file finds: its CRC-32, and how many of its float32 values
// (every tensor of a rank file is float32 state: master, exp_avg, exp_avg_sq) are NaN or Inf.
struct FileScan {
  uint32_t crc = 0;
  uint64_t nonfinite = 0;
};

// The CRC and the non-finite count in one pass: 8 MiB chunks over the cores (as
// crc32_parallel), each checksummed and scanned 256 KiB at a time, so the scan reads bytes the
// checksum just brought into cache and costs no extra trip to the disk or to memory.
FileScan scan_rank_file(const uint8_t* p, size_t size) {
  uint64_t header = 0;
  if (size >= 8) std::memcpy(&header, p, 8);
  // The data region: after the 8-byte length and the JSON header; our writer pads the header
  // so that it starts 8-aligned. Anything else is scanned for nothing (the CRC still holds).
  const size_t data_begin = size >= 8 && header <= size - 8 && (8 + header) % 4 == 0 ? size_t(8 + header) : size;
  constexpr size_t kChunk = size_t{8} << 20, kBlock = size_t{256} << 10;
  const int64_t n = int64_t((size + kChunk - 1) / kChunk);
  std::vector<uLong> part(static_cast<size_t>(n));
  uint64_t nonfinite = 0;
#pragma omp parallel for schedule(static) reduction(+ : nonfinite)
  for (int64_t i = 0; i < n; ++i) {
    const size_t b = size_t(i) * kChunk, e = std::min(b + kChunk, size);
    uLong c = crc32_z(0, nullptr, 0);
    for (size_t at = b; at < e; at += kBlock) {
      const size_t end = std::min(at + kBlock, e);
      c = crc32_z(c, p + at, end - at);
      // Exponent bits all ones: Inf or NaN. Block edges and the data start are multiples of
      // 4 in a page-aligned mapping, so every float is read whole, once, aligned.
      const size_t lo = std::max(at, data_begin);
      if (lo < end) {
        using Word = uint32_t __attribute__((may_alias));
        const auto* w = reinterpret_cast<const Word*>(p + lo);
        const size_t words = (end - lo) / 4;
        uint64_t count = 0;
#pragma omp simd reduction(+ : count)
        for (size_t k = 0; k < words; ++k) count += (w[k] & 0x7f800000u) == 0x7f800000u;
        nonfinite += count;
      }
    }
    part[size_t(i)] = c;
  }
  uLong c = crc32_z(0, nullptr, 0);
  for (int64_t i = 0; i < n; ++i) {
    const size_t len = std::min(kChunk, size - size_t(i) * kChunk);
    c = crc32_combine(c, part[size_t(i)], z_off_t(len));
  }
  return FileScan{uint32_t(c), nonfinite};
}

FileScan scan_file(const std::string& path, uint64_t expect_bytes) {
  const int fd = open_regular_file(path);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || uint64_t(st.st_size) != expect_bytes) {
    ::close(fd);
    FSDP_FAIL("{}: size {} bytes, but the manifest records {} (truncated or replaced)", path, uint64_t(st.st_size),
              expect_bytes);
  }
  if (expect_bytes == 0) {
    ::close(fd);
    return {};
  }
  void* map = ::mmap(nullptr, expect_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  FSDP_CHECK(map != MAP_FAILED, "cannot map {}: {}", path, std::strerror(errno));
  ::madvise(map, expect_bytes, MADV_SEQUENTIAL);
  const FileScan scan = scan_rank_file(static_cast<const uint8_t*>(map), expect_bytes);
  ::munmap(map, expect_bytes);
  return scan;
}

// A unit's elements as one rank lays it out: a stored unit's (its slots' slices times the
// tensor degree) or a run's (its slots' whole shapes).
int64_t whole_numel(const ManifestUnit& u, int tensor_parallel) {
  if (u.slots.empty()) return u.numel;
  int64_t n = 0;
  for (const ManifestSlot& s : u.slots) {
    const int64_t slice = s.shape.size() == 2 ? s.shape[0] * s.shape[1] : s.shape[0];
    n += s.split >= 0 ? slice * tensor_parallel : slice;
  }
  return n;
}

int64_t whole_numel(const model::UnitLayout& u) {
  int64_t n = 0;
  for (const model::ParamSlot& s : u.params) n += s.whole_shape().numel();
  return n;
}

// The tensor degree and rank a run's unit is laid out for (1, 0: one rank's whole unit, or
// a unit of whole slots only).
std::pair<int, int> tensor_slice_of(const model::UnitLayout& u) {
  for (const model::ParamSlot& s : u.params)
    if (!s.tp.replicated()) return {s.tp.parts, s.tp.index};
  return {1, 0};
}

bool same_slots(const ManifestUnit& u, const model::UnitLayout& target) {
  if (u.slots.size() != target.params.size()) return false;
  for (size_t i = 0; i < u.slots.size(); ++i) {
    const ManifestSlot& m = u.slots[i];
    const model::ParamSlot& s = target.params[i];
    if (m.name != s.name || m.offset != s.offset || m.split != s.tp.dim ||
        m.shape != std::vector<int64_t>(s.shape.begin(), s.shape.end()))
      return false;
  }
  return true;
}

// Where a stored unit holds a parameter: its offset, the slice's rows and columns (a 1-D
// parameter is one row) and the split dimension (-1: whole on every tensor rank).
struct StoredSlot {
  int64_t offset = 0, rows = 1, cols = 1;
  int split = -1;
};

StoredSlot stored_slot(const ManifestUnit& u, int tensor_parallel, const model::ParamSlot& s, const std::string& dir) {
  const Dims w = s.whole_shape();
  const int64_t wr = w.size() == 2 ? w[0] : 1, wc = w.size() == 2 ? w[1] : w.numel();
  if (u.slots.empty()) return StoredSlot{s.whole_offset, wr, wc, -1};  // one rank's layout: the whole unit
  for (const ManifestSlot& m : u.slots) {
    if (m.name != s.name) continue;
    StoredSlot r{m.offset, m.shape.size() == 2 ? m.shape[0] : 1, m.shape.size() == 2 ? m.shape[1] : m.shape[0], m.split};
    const int64_t T = tensor_parallel;
    const bool fits = (r.split == 0 ? r.rows * T : r.rows) == wr && (r.split == 1 ? r.cols * T : r.cols) == wc;
    FSDP_CHECK(fits, "checkpoint {}: {} is stored as {} slices of {}x{} (split {}), the model's is {}", dir, s.name, T,
               r.rows, r.cols, r.split, w.str());
    return r;
  }
  FSDP_FAIL("checkpoint {}: unit {} has no parameter '{}'", dir, u.name, s.name);
}

}  // namespace

struct CheckpointReader::OpenFiles {
  std::map<int, std::unique_ptr<SafetensorsFile>> files;
};

CheckpointReader::CheckpointReader(const std::string& dir) : dir_(dir), open_(std::make_unique<OpenFiles>()) {
  const fs::path path = fs::path(dir) / kManifestFile;
  std::error_code ec;
  FSDP_CHECK(fs::exists(path, ec), "{}: no manifest (not a checkpoint, or one whose save never completed)",
             path.string());
  manifest_ = parse_manifest(read_regular_file(path.string()), path.string());
  check_structure();
}

// Each tensor rank's pieces tile [0, numel) of every unit and point at listed files, which
// exist with their recorded sizes.
void CheckpointReader::check_structure() const {
  const Manifest& m = manifest_;
  const std::string path = (fs::path(dir_) / kManifestFile).string();
  for (const ManifestUnit& u : m.units) {
    int64_t next = 0;
    int rank = 0;
    for (const ManifestPiece& p : u.pieces) {
      FSDP_CHECK(p.file >= 0 && p.file < int(m.files.size()), "{}: unit {} names file #{}, which is not listed", path,
                 u.name, p.file);
      if (p.tensor_rank != rank) {  // sorted by tensor rank: the previous rank's tiling is complete
        FSDP_CHECK(next == u.numel && p.tensor_rank == rank + 1,
                   "{}: unit {} pieces of tensor rank {} cover {} of its {} elements", path, u.name, rank, next,
                   u.numel);
        rank = p.tensor_rank, next = 0;
      }
      // extent <= numel - next: no piece reaches past the unit, and next never overflows
      // (an extent of 2^63 - 1 did: found by tests/fuzz/fuzz_checkpoint_manifest.cpp).
      FSDP_CHECK(p.begin == next && p.extent > 0 && p.extent <= u.numel - next,
                 "{}: unit {} pieces do not tile its {} elements (gap, overlap or overrun at {})", path, u.name,
                 u.numel, next);
      next += p.extent;
    }
    FSDP_CHECK(next == u.numel && (u.numel == 0 || rank == m.tensor_parallel - 1),
               "{}: unit {} pieces of tensor rank {} cover {} of its {} elements", path, u.name, rank, next, u.numel);
  }
  for (const ManifestFile& f : m.files) {
    const fs::path fp = fs::path(dir_) / f.name;
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
  const FileScan scan = scan_file(path, f.bytes);
  FSDP_CHECK(scan.crc == f.crc32, "{}: CRC-32 {:08x} does not match the manifest's {:08x} (the file is corrupt)", path,
             scan.crc, f.crc32);
  FSDP_CHECK(scan.nonfinite == 0,
             "{}: {} weights or optimizer moments are NaN or Inf: it was saved from a diverged run and would only "
             "diverge again",
             path, scan.nonfinite);
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
  FSDP_CHECK(m.tie_word_embeddings == cfg.tie_word_embeddings,
             "checkpoint {} holds a model with tie_word_embeddings = {}, but the config asks for {} "
             "(model.tie_word_embeddings): it is a checkpoint of a different model",
             dir_, m.tie_word_embeddings, cfg.tie_word_embeddings);
  // Under expert parallelism the model's expert units are parts of their blocks in one
  // process's layout, which is what every checkpoint stores (manifest.h); each holds
  // 1 / expert_parallel of its block's experts.
  std::vector<int64_t> want(units.size(), 0);
  size_t blocks = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    const int of = units[u].experts_of;
    if (of < 0) ++blocks;
    want[size_t(of >= 0 ? of : int(u))] += whole_numel(units[u]) * (of >= 0 ? cfg.expert_parallel : 1);
  }
  FSDP_CHECK(manifest_.units.size() == blocks, "checkpoint {} has {} parameter units, the model {}", dir_,
             manifest_.units.size(), blocks);
  for (size_t u = 0; u < blocks; ++u) {
    const int64_t have = whole_numel(manifest_.units[u], manifest_.tensor_parallel);
    FSDP_CHECK(manifest_.units[u].name == units[u].name && have == want[u],
               "checkpoint {}: unit {} is '{}' with {} elements, the model's is '{}' with {}", dir_, u,
               manifest_.units[u].name, have, units[u].name, want[u]);
  }
}

void CheckpointReader::read(int unit, std::string_view kind, int64_t begin, const Tensor& out) const {
  check_read(unit, out);
  float* dst = out.data<float>();
  std::fill(dst, dst + out.numel(), 0.0f);
  read_stored(unit, kind, 0, begin, out.numel(), dst);
}

// Note [Reading another tensor layout]
// Element i of a target slot is element whole_index(i) of the whole parameter (row r,
// column c); the stored layout's slot of that name says which tensor rank holds (r, c)
// and where in its unit (slice t of its split dimension: t = r / rows or c / cols). A run
// of elements contiguous on both sides (up to the end of a row of whichever side is split
// by columns, or of the stored slice) is read at once. The same tensor degree reads each
// rank's own stored unit as it is.
//
// Expert parallelism: an expert unit's slots are read from its block's stored unit, and a
// block without its experts slot by slot, both at their one-process offsets (whole_offset).
void CheckpointReader::read(const model::UnitLayout& target, int unit, std::string_view kind, int64_t begin,
                            const Tensor& out) const {
  if (target.experts_of >= 0) unit = target.experts_of;
  check_read(unit, out);
  const ManifestUnit& u = manifest_.units[size_t(unit)];
  float* dst = out.data<float>();
  const int64_t n = out.numel(), end = begin + n;
  std::fill(dst, dst + n, 0.0f);
  const int T = manifest_.tensor_parallel;
  const auto [parts, index] = tensor_slice_of(target);
  const bool whole_unit = target.experts_of < 0 && (T > 1 || target.numel == u.numel);
  if (parts == T && whole_unit && (T == 1 || same_slots(u, target))) {
    read_stored(unit, kind, index, begin, std::min(n, std::max<int64_t>(target.numel - begin, 0)), dst);
    return;
  }
  for (const model::ParamSlot& s : target.params) {
    const int64_t lo = std::max(begin, s.offset), hi = std::min(end, s.offset + s.numel);
    if (lo >= hi) continue;
    const StoredSlot ss = stored_slot(u, T, s, dir_);
    const Dims whole = s.whole_shape();
    const int64_t wc = whole.size() == 2 ? whole[1] : whole.numel();  // a 1-D slot is one row
    for (int64_t at = lo; at < hi;) {
      const int64_t li = at - s.offset, wi = s.whole_index(li), r = wi / wc, c = wi % wc;
      int t = 0;
      int64_t at_stored = 0, run = hi - at;
      if (s.tp.dim == 1) run = std::min(run, s.shape[1] - li % s.shape[1]);
      if (ss.split == 0) {
        t = int(r / ss.rows);
        const int64_t rr = r - int64_t(t) * ss.rows;
        at_stored = rr * wc + c;
        run = std::min(run, (ss.rows - rr) * wc - c);
      } else if (ss.split == 1) {
        t = int(c / ss.cols);
        const int64_t cc = c - int64_t(t) * ss.cols;
        at_stored = r * ss.cols + cc;
        run = std::min(run, ss.cols - cc);
      } else {
        at_stored = wi;
        run = std::min(run, ss.rows * ss.cols - wi);
      }
      read_stored(unit, kind, t, ss.offset + at_stored, run, dst + (at - begin));
      at += run;
    }
  }
}

void CheckpointReader::check_read(int unit, const Tensor& out) const {
  FSDP_CHECK(unit >= 0 && unit < int(manifest_.units.size()), "checkpoint {}: no unit {}", dir_, unit);
  FSDP_CHECK(out.dtype() == DType::F32 && out.is_contiguous() && out.device().is_cpu(),
             "checkpoint read needs a contiguous float32 CPU tensor");
}

void CheckpointReader::read_stored(int unit, std::string_view kind, int tensor_rank, int64_t begin, int64_t n,
                                   float* dst) const {
  const ManifestUnit& u = manifest_.units[size_t(unit)];
  const int64_t end = begin + n;
  for (const ManifestPiece& p : u.pieces) {
    if (p.tensor_rank != tensor_rank) continue;
    const int64_t lo = std::max(begin, p.begin), hi = std::min(end, p.begin + p.extent);
    if (lo >= hi) continue;
    const std::string name = state_tensor_name(p.tensor.empty() ? u.name : p.tensor, kind);
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
  try {
    return is_manifest_text(read_regular_file((fs::path(dir) / kManifestFile).string()));
  } catch (const Error&) {
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
    if (detail::count_failures(!why.empty(), world) == 0) return path;
    if (why.empty() && world.rank() == 0) spdlog::warn("skipping checkpoint {}: another rank could not verify it", path);
  }
  return "";
}

void verify_checkpoint(const std::string& path, dist::Communicator& world) {
  const std::string why = check_share(path, world);
  if (detail::count_failures(!why.empty(), world) == 0) return;
  FSDP_CHECK(why.empty(), "cannot resume from {}: {}", path, why);
  FSDP_FAIL("cannot resume from {}: another rank could not verify it (see its error)", path);
}

}  // namespace fsdp::ckpt
