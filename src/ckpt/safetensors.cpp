// safetensors reader (mmap + validation), dtype converters, folder resolution and the
// crash-safe writer. Format and layout: see include/fsdp/ckpt/safetensors.h.
#include "fsdp/ckpt/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <set>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>
#include <zlib.h>

#include "fsdp/core/error.h"
#include "fsdp/core/json_file.h"
#include "fsdp/core/regular_file.h"
#include "durable_file.h"

namespace fsdp::ckpt {

// The format stores elements little-endian; the converters below copy them as they are.
static_assert(std::endian::native == std::endian::little, "safetensors reader assumes a little-endian host");

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// numel of `shape`, or false if a dimension is negative or the product overflows int64.
bool checked_numel(const std::vector<int64_t>& shape, int64_t* numel) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return false;
  }
  *numel = n;
  return true;
}

float bf16_to_f32(uint16_t h) {
  // bf16 is the top half of an fp32: every value (subnormals, inf, NaN payloads) maps exactly.
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf, or NaN with its payload kept
  } else if (exp != 0) {
    bits = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;  // +-0
  } else {
    // Subnormal: mant * 2^-24, a normal fp32. Move the leading 1 (bit p) to the implicit bit.
    const uint32_t p = 31 - static_cast<uint32_t>(std::countl_zero(mant));
    bits = sign | ((p + 127 - 24) << 23) | ((mant << (23 - p)) & 0x7FFFFFu);
  }
  return std::bit_cast<float>(bits);
}

template <typename Src, typename Fn>
void convert(const TensorEntry& e, Fn&& fn, auto* out) {
  const int64_t n = e.numel();
  for (int64_t i = 0; i < n; ++i) {
    Src v;
    std::memcpy(&v, e.data + i * static_cast<int64_t>(sizeof(Src)), sizeof(Src));
    out[i] = fn(v);
  }
}

std::string shape_str(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// Owns a file descriptor; the writer's error paths close it exactly once.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};


}  // namespace

size_t safetensors_dtype_size(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"I64", 8}, {"U64", 8}, {"F64", 8}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

int64_t TensorEntry::numel() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

void read_as_f32(const TensorEntry& e, float* out) {
  if (e.dtype == "F32") {
    if (e.nbytes > 0) std::memcpy(out, e.data, e.nbytes);
  } else if (e.dtype == "BF16") {
    convert<uint16_t>(e, bf16_to_f32, out);
  } else if (e.dtype == "F16") {
    convert<uint16_t>(e, f16_to_f32, out);
  } else if (e.dtype == "F64") {
    convert<double>(e, [](double v) { return static_cast<float>(v); }, out);
  } else {
    FSDP_FAIL("tensor {} in {} has dtype {}; read_as_f32 converts only F32, BF16, F16 and F64", e.name,
              e.file, e.dtype);
  }
}

std::vector<float> read_as_f32(const TensorEntry& e) {
  std::vector<float> out(static_cast<size_t>(e.numel()));
  read_as_f32(e, out.data());
  return out;
}

void read_as_i64(const TensorEntry& e, int64_t* out) {
  if (e.dtype == "I64") {
    if (e.nbytes > 0) std::memcpy(out, e.data, e.nbytes);
  } else if (e.dtype == "I32") {
    convert<int32_t>(e, [](int32_t v) { return static_cast<int64_t>(v); }, out);
  } else {
    FSDP_FAIL("tensor {} in {} has dtype {}; read_as_i64 converts only I64 and I32", e.name, e.file, e.dtype);
  }
}

std::vector<int64_t> read_as_i64(const TensorEntry& e) {
  std::vector<int64_t> out(static_cast<size_t>(e.numel()));
  read_as_i64(e, out.data());
  return out;
}

// ---- SafetensorsFile ------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  Fd fd(open_regular_file(path));  // a FIFO in a model folder must not hang the importer
  struct stat st {};
  FSDP_CHECK(::fstat(fd.get(), &st) == 0, "cannot stat {}: {}", path, std::strerror(errno));
  const auto file_size = static_cast<uint64_t>(st.st_size);
  FSDP_CHECK(file_size >= 8, "{} is truncated: {} bytes, less than the 8-byte header length", path, file_size);

  map_ = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    FSDP_FAIL("cannot mmap {} ({} bytes): {}", path, file_size, std::strerror(errno));
  }
  map_size_ = file_size;

  uint64_t header_len = 0;
  const auto* bytes = static_cast<const unsigned char*>(map_);
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  try {
    FSDP_CHECK(header_len <= kMaxHeaderBytes, "{}: header length {} exceeds the format's limit of {} bytes",
               path, header_len, kMaxHeaderBytes);
    FSDP_CHECK(header_len <= file_size - 8,
               "{} is truncated or corrupt: header length {} runs past the end of the {}-byte file", path,
               header_len, file_size);
    parse_header(header_len);
  } catch (...) {
    unmap();
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_size_(std::exchange(other.map_size_, 0)),
      entries_(std::move(other.entries_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
    entries_ = std::move(other.entries_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

void SafetensorsFile::unmap() noexcept {
  if (map_ != nullptr) ::munmap(map_, map_size_);
  map_ = nullptr;
  map_size_ = 0;
}

void SafetensorsFile::parse_header(uint64_t header_len) {
  const auto* base = static_cast<const std::byte*>(map_);
  const char* text = reinterpret_cast<const char*>(base + 8);
  const json header = json_file::parse(std::string_view(text, header_len), path_ + ": header");
  FSDP_CHECK(header.is_object(), "{}: header is JSON but not an object", path_);

  const std::byte* data_region = base + 8 + header_len;
  const uint64_t data_size = map_size_ - 8 - header_len;
  struct Range {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Range> ranges;

  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      FSDP_CHECK(info.is_object(), "{}: __metadata__ is not an object", path_);
      for (const auto& [key, value] : info.items()) {
        metadata_[key] = value.is_string() ? value.get<std::string>() : value.dump();
      }
      continue;
    }
    FSDP_CHECK(info.is_object(), "{}: tensor {}: entry is not an object", path_, name);
    const auto dtype = info.find("dtype");
    const auto shape = info.find("shape");
    const auto offsets = info.find("data_offsets");
    FSDP_CHECK(dtype != info.end() && dtype->is_string(), "{}: tensor {}: no \"dtype\" string", path_, name);
    FSDP_CHECK(shape != info.end() && shape->is_array(), "{}: tensor {}: no \"shape\" array", path_, name);
    FSDP_CHECK(offsets != info.end() && offsets->is_array() && offsets->size() == 2,
               "{}: tensor {}: no \"data_offsets\" [begin, end] pair", path_, name);

    TensorEntry e;
    e.name = name;
    e.file = path_;
    e.dtype = dtype->get<std::string>();
    const size_t elem = safetensors_dtype_size(e.dtype);
    FSDP_CHECK(elem != 0, "{}: tensor {}: unsupported dtype {}", path_, name, e.dtype);
    for (const auto& d : *shape) {
      FSDP_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= uint64_t{std::numeric_limits<int64_t>::max()},
                 "{}: tensor {}: shape {} has a dimension that is not a non-negative integer", path_, name,
                 shape->dump());
      e.shape.push_back(d.get<int64_t>());
    }
    for (const auto& o : *offsets) {
      FSDP_CHECK(o.is_number_unsigned(), "{}: tensor {}: data_offsets {} are not non-negative integers", path_,
                 name, offsets->dump());
    }
    const auto begin = (*offsets)[0].get<uint64_t>();
    const auto end = (*offsets)[1].get<uint64_t>();
    FSDP_CHECK(begin <= end, "{}: tensor {}: data_offsets [{}, {}] begin after they end", path_, name, begin, end);
    FSDP_CHECK(end <= data_size,
               "{}: tensor {}: data_offsets [{}, {}] run past the {}-byte data region (file truncated?)", path_,
               name, begin, end, data_size);
    int64_t numel = 0;
    uint64_t want = 0;
    FSDP_CHECK(checked_numel(e.shape, &numel) &&
                   !__builtin_mul_overflow(static_cast<uint64_t>(numel), uint64_t{elem}, &want),
               "{}: tensor {}: shape {} is too large", path_, name, shape_str(e.shape));
    FSDP_CHECK(end - begin == want, "{}: tensor {}: data_offsets [{}, {}] hold {} bytes but {} {} needs {}",
               path_, name, begin, end, end - begin, e.dtype, shape_str(e.shape), want);
    e.data = data_region + begin;
    e.nbytes = static_cast<size_t>(want);
    const auto [it, inserted] = entries_.emplace(name, std::move(e));
    if (want > 0) ranges.push_back({begin, end, &it->first});
  }

  // Two tensors sharing bytes means a corrupt header (the format forbids aliasing).
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    FSDP_CHECK(ranges[i].begin >= ranges[i - 1].end, "{}: tensors {} and {} overlap (bytes [{}, {}) and [{}, {}))",
               path_, *ranges[i - 1].name, *ranges[i].name, ranges[i - 1].begin, ranges[i - 1].end,
               ranges[i].begin, ranges[i].end);
  }
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

const TensorEntry& SafetensorsFile::entry(const std::string& name) const {
  const auto it = entries_.find(name);
  FSDP_CHECK(it != entries_.end(), "tensor {} not found in {} ({} tensors)", name, path_, entries_.size());
  return it->second;
}

// ---- Writer ---------------------------------------------------------------------------

uint32_t crc32_parallel(const void* data, size_t size, uint32_t crc) {
  constexpr size_t kChunk = size_t{8} << 20;
  const auto* p = static_cast<const Bytef*>(data);
  if (size <= kChunk) return uint32_t(crc32_z(crc, p, size));
  const int64_t n = int64_t((size + kChunk - 1) / kChunk);
  std::vector<uLong> part(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const size_t b = size_t(i) * kChunk, len = std::min(kChunk, size - b);
    part[size_t(i)] = crc32_z(0, p + b, len);
  }
  uLong c = crc;
  for (int64_t i = 0; i < n; ++i) {
    const size_t len = std::min(kChunk, size - size_t(i) * kChunk);
    c = crc32_combine(c, part[size_t(i)], z_off_t(len));
  }
  return uint32_t(c);
}

uint32_t crc32_concat(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return uint32_t(crc32_combine(crc_a, crc_b, z_off_t(len_b)));
}

WrittenFile write_safetensors(const std::string& path, const std::vector<WriteEntry>& entries,
                              const std::map<std::string, std::string>& metadata) {
  // Validate everything before creating a file, so a bad call leaves nothing behind.
  std::set<std::string> seen;
  for (const auto& e : entries) {
    FSDP_CHECK(!e.name.empty() && e.name != "__metadata__", "{}: invalid tensor name '{}'", path, e.name);
    FSDP_CHECK(seen.insert(e.name).second, "{}: tensor {} given twice", path, e.name);
    const size_t elem = safetensors_dtype_size(e.dtype);
    FSDP_CHECK(elem != 0, "{}: tensor {}: unsupported dtype {}", path, e.name, e.dtype);
    int64_t numel = 0;
    uint64_t want = 0;
    FSDP_CHECK(checked_numel(e.shape, &numel) &&
                   !__builtin_mul_overflow(static_cast<uint64_t>(numel), uint64_t{elem}, &want),
               "{}: tensor {}: invalid shape {}", path, e.name, shape_str(e.shape));
    FSDP_CHECK(e.nbytes == want, "{}: tensor {}: {} bytes given but {} {} needs {}", path, e.name, e.nbytes,
               e.dtype, shape_str(e.shape), want);
    FSDP_CHECK(e.data != nullptr || e.nbytes == 0, "{}: tensor {}: null data", path, e.name);
  }

  // Widest elements first: with the data region starting 8-aligned, every tensor is then aligned.
  std::vector<size_t> order(entries.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return safetensors_dtype_size(entries[a].dtype) > safetensors_dtype_size(entries[b].dtype);
  });
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (size_t i : order) {
    const auto& e = entries[i];
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.nbytes}}};
    offset += e.nbytes;
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(uint64_t{text.size()} >> (8 * i));

  const std::string tmp = path + ".tmp";
  // The file as a list of byte ranges, in order.
  std::vector<std::pair<const unsigned char*, size_t>> parts;
  parts.emplace_back(len_bytes, sizeof(len_bytes));
  parts.emplace_back(reinterpret_cast<const unsigned char*>(text.data()), text.size());
  for (size_t i : order) parts.emplace_back(static_cast<const unsigned char*>(entries[i].data), entries[i].nbytes);
  WrittenFile written;
  for (const auto& p : parts) written.bytes += p.second;
  // The CRC runs on a thread of its own beside the writes (each about as fast as a disk),
  // so a large file costs max(write, CRC) rather than their sum.
  std::thread crc_thread([&parts, &written] {
    uLong c = crc32_z(0, nullptr, 0);
    for (const auto& p : parts) c = crc32_z(c, p.first, p.second);
    written.crc32 = uint32_t(c);
  });
  auto join_crc = [&crc_thread] {
    if (crc_thread.joinable()) crc_thread.join();
  };
  try {
    Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    FSDP_CHECK(fd.get() >= 0, "cannot create {}: {}", tmp, std::strerror(errno));
    // 1 MiB write() calls: the kernel's copy of a cache-sized piece runs twice as fast as
    // one huge call (measured 1.09 vs 0.51 GB/s with fsync here). Throttling writeback with
    // sync_file_range every 32 MiB was measured too, and halved the speed on this VM's
    // disk (0.34 vs 0.71 GB/s for 6.3 GB): the page cache and one fsync do better.
    constexpr size_t kWrite = size_t{1} << 20;
    for (const auto& [data, n] : parts) {
      for (size_t at = 0; at < n; at += kWrite) {
        detail::write_all(fd.get(), data + at, std::min(kWrite, n - at), tmp);
      }
    }
    join_crc();
    FSDP_CHECK(::fsync(fd.get()) == 0, "cannot fsync {}: {}", tmp, std::strerror(errno));
    FSDP_CHECK(::close(fd.release()) == 0, "cannot close {}: {}", tmp, std::strerror(errno));
    FSDP_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename {} to {}: {}", tmp, path,
               std::strerror(errno));
  } catch (...) {
    join_crc();
    ::unlink(tmp.c_str());
    throw;
  }
  detail::fsync_dir(fs::path(path).parent_path());  // make the rename itself durable
  return written;
}

}  // namespace fsdp::ckpt
