// Megatron-LM indexed-dataset shards (layout in include/fsdp/data/indexed_dataset.h).
//
// Writer: tokens stream into <prefix>.bin.tmp as documents arrive; only the per-document
// sizes stay in memory. finish() writes <prefix>.idx.tmp, fsyncs both, renames the .bin
// and then the .idx, and fsyncs the directory: a shard whose .idx exists is complete.
//
// Reader: both files are memory-mapped and never copied. The index fields start at byte
// 34 (9 + 8 + 1 + 8 + 8), so the arrays are not naturally aligned; every element is read
// with memcpy. The whole index is validated once on open (O(N + M)), so later reads only
// bounds-check their arguments.
#include "fsdp/data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>

#include <zlib.h>

#include "fsdp/core/error.h"
#include "fsdp/core/regular_file.h"

namespace fsdp::data {

static_assert(std::endian::native == std::endian::little, "indexed datasets are little-endian; big-endian hosts unsupported");

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kVersion = 1;
constexpr int64_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;

// Megatron's DType codes (megatron/core/datasets/indexed_dataset.py).
enum : uint8_t { kU8 = 1, kI8 = 2, kI16 = 3, kI32 = 4, kI64 = 5, kF64 = 6, kF32 = 7, kU16 = 8 };

// Bytes per token for the codes we read; 0 for codes that are not token ids here.
int64_t token_bytes(uint8_t code) {
  switch (code) {
    case kU8: return 1;
    case kI16: return 2;
    case kU16: return 2;
    case kI32: return 4;
    case kI64: return 8;
    default: return 0;
  }
}

const char* dtype_name(uint8_t code) {
  switch (code) {
    case kU8: return "uint8";
    case kI8: return "int8";
    case kI16: return "int16";
    case kI32: return "int32";
    case kI64: return "int64";
    case kF64: return "float64";
    case kF32: return "float32";
    case kU16: return "uint16";
    default: return "unknown";
  }
}

template <typename T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::string errno_text() { return std::strerror(errno); }

// zlib's CRC-32 (the checksum `prepare` records per file), over any length.
uint32_t crc32_of(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {
    const uInt chunk = uInt(std::min<size_t>(n, size_t(1) << 30));
    crc = uint32_t(::crc32(crc, p, chunk));
    p += chunk;
    n -= chunk;
  }
  return crc;
}

// Token `i` of a buffer of `code` tokens, widened to int64.
int64_t token_at(const unsigned char* p, uint8_t code, int64_t i) {
  switch (code) {
    case kU8: return p[i];
    case kI16: return load<int16_t>(p + 2 * i);
    case kU16: return load<uint16_t>(p + 2 * i);
    case kI32: return load<int32_t>(p + 4 * i);
    default: return load<int64_t>(p + 8 * i);
  }
}

// A read-only mapping of a whole file (none for an empty file: mmap rejects length 0).
struct Mapping {
  const unsigned char* data = nullptr;
  int64_t size = 0;

  void open(const std::string& path) {
    // A FIFO planted as a shard would block a plain open(2) forever.
    const int fd = open_regular_file(path);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const std::string why = errno_text();
      ::close(fd);
      FSDP_FAIL("{}: cannot stat ({})", path, why);
    }
    size = int64_t(st.st_size);
    if (size > 0) {
      void* p = ::mmap(nullptr, size_t(size), PROT_READ, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED) {
        const std::string why = errno_text();
        ::close(fd);
        FSDP_FAIL("{}: cannot mmap {} bytes ({})", path, size, why);
      }
      data = static_cast<const unsigned char*>(p);
    }
    ::close(fd);  // the mapping keeps the file alive
  }
  ~Mapping() {
    if (data != nullptr) ::munmap(const_cast<unsigned char*>(data), size_t(size));
  }
};

// fflush + fsync + fclose, each checked.
void close_synced(std::FILE*& f, const std::string& path) {
  std::FILE* g = f;
  f = nullptr;
  const bool ok = std::fflush(g) == 0 && ::fsync(::fileno(g)) == 0;
  const std::string why = ok ? std::string() : errno_text();
  const bool closed = std::fclose(g) == 0;
  FSDP_CHECK(ok && closed, "{}: cannot write to disk ({})", path, ok ? errno_text() : why);
}

// Writes and folds the bytes into the file's running size and CRC-32 (`sum` may be null).
void write_bytes(std::FILE* f, const void* p, size_t n, const std::string& path, int64_t* bytes = nullptr,
                 uint32_t* crc = nullptr) {
  FSDP_CHECK(n == 0 || std::fwrite(p, 1, n, f) == n, "{}: write of {} bytes failed ({})", path, n, errno_text());
  if (bytes != nullptr) *bytes += int64_t(n);
  if (crc != nullptr) *crc = crc32_of(p, n, *crc);
}

// fsync of the directory holding `path`, so the renames themselves survive a crash.
void sync_parent_dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: some filesystems do not allow opening directories
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Writer

struct IndexedDatasetWriter::Impl {
  std::string prefix;
  int64_t vocab_size = 0;
  uint8_t code = kU16;
  std::string bin_tmp, idx_tmp;
  std::FILE* bin = nullptr;
  std::vector<int32_t> sizes;
  int64_t tokens = 0;
  bool finished = false;
  std::vector<unsigned char> buf;  // one document converted to the on-disk dtype
  ShardChecksum sum;
};

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, int64_t vocab_size) : impl_(std::make_unique<Impl>()) {
  FSDP_CHECK(!prefix.empty(), "indexed dataset writer: empty output prefix");
  FSDP_CHECK(vocab_size >= 1 && vocab_size <= int64_t(std::numeric_limits<int32_t>::max()) + 1,
             "{}: vocab_size {} must be in [1, 2^31] (token ids are int32)", prefix, vocab_size);
  Impl& m = *impl_;
  m.prefix = std::move(prefix);
  m.vocab_size = vocab_size;
  m.code = vocab_size <= 65536 ? kU16 : kI32;
  m.bin_tmp = m.prefix + ".bin.tmp";
  m.idx_tmp = m.prefix + ".idx.tmp";
  m.bin = std::fopen(m.bin_tmp.c_str(), "wb");
  FSDP_CHECK(m.bin != nullptr, "{}: cannot create ({})", m.bin_tmp, errno_text());
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (!impl_ || impl_->finished) return;
  if (impl_->bin != nullptr) std::fclose(impl_->bin);
  std::remove(impl_->bin_tmp.c_str());
  std::remove(impl_->idx_tmp.c_str());
}

void IndexedDatasetWriter::add_document(const int32_t* tokens, int64_t count) {
  Impl& m = *impl_;
  FSDP_CHECK(!m.finished, "{}: add_document after finish()", m.prefix);
  FSDP_CHECK(m.bin != nullptr, "{}: writer is unusable after a failed finish()", m.prefix);
  const int64_t doc = int64_t(m.sizes.size());
  FSDP_CHECK(count >= 0 && count <= std::numeric_limits<int32_t>::max(),
             "{}: document {} has {} tokens; sizes are int32 in the index", m.prefix, doc, count);
  FSDP_CHECK(count == 0 || tokens != nullptr, "{}: document {}: null tokens with count {}", m.prefix, doc, count);
  // Validate the whole document before writing any of it, so a rejected document leaves
  // the shard as it was.
  for (int64_t i = 0; i < count; ++i) {
    FSDP_CHECK(tokens[i] >= 0 && tokens[i] < m.vocab_size,
               "{}: document {} token {} has id {}, outside the vocabulary [0, {})", m.prefix, doc, i, tokens[i],
               m.vocab_size);
  }
  if (m.code == kU16) {
    m.buf.resize(size_t(count) * 2);
    for (int64_t i = 0; i < count; ++i) {
      const uint16_t v = uint16_t(tokens[i]);
      std::memcpy(m.buf.data() + 2 * i, &v, 2);
    }
    write_bytes(m.bin, m.buf.data(), m.buf.size(), m.bin_tmp, &m.sum.bin_bytes, &m.sum.bin_crc32);
  } else {
    write_bytes(m.bin, tokens, size_t(count) * 4, m.bin_tmp, &m.sum.bin_bytes, &m.sum.bin_crc32);
  }
  m.sizes.push_back(int32_t(count));
  m.tokens += count;
}

void IndexedDatasetWriter::finish() {
  Impl& m = *impl_;
  FSDP_CHECK(!m.finished, "{}: finish() called twice", m.prefix);
  FSDP_CHECK(m.bin != nullptr, "{}: writer is unusable after a failed finish()", m.prefix);
  close_synced(m.bin, m.bin_tmp);

  const uint64_t n = m.sizes.size();
  std::FILE* idx = std::fopen(m.idx_tmp.c_str(), "wb");
  FSDP_CHECK(idx != nullptr, "{}: cannot create ({})", m.idx_tmp, errno_text());
  try {
    const uint64_t n_docs = n + 1;  // doc_idx = 0, 1, ..., N: one sequence per document
    write_bytes(idx, kMagic, sizeof(kMagic), m.idx_tmp, &m.sum.idx_bytes, &m.sum.idx_crc32);
    write_bytes(idx, &kVersion, 8, m.idx_tmp, &m.sum.idx_bytes, &m.sum.idx_crc32);
    write_bytes(idx, &m.code, 1, m.idx_tmp, &m.sum.idx_bytes, &m.sum.idx_crc32);
    write_bytes(idx, &n, 8, m.idx_tmp, &m.sum.idx_bytes, &m.sum.idx_crc32);
    write_bytes(idx, &n_docs, 8, m.idx_tmp, &m.sum.idx_bytes, &m.sum.idx_crc32);
    write_bytes(idx, m.sizes.data(), n * 4, m.idx_tmp, &m.sum.idx_bytes, &m.sum.idx_crc32);
    const int64_t elem = token_bytes(m.code);
    std::vector<int64_t> longs(n);
    int64_t ptr = 0;
    for (uint64_t i = 0; i < n; ++i) {
      longs[i] = ptr;
      ptr += int64_t(m.sizes[i]) * elem;
    }
    write_bytes(idx, longs.data(), n * 8, m.idx_tmp, &m.sum.idx_bytes, &m.sum.idx_crc32);
    longs.resize(n_docs);
    for (uint64_t i = 0; i < n_docs; ++i) longs[i] = int64_t(i);
    write_bytes(idx, longs.data(), n_docs * 8, m.idx_tmp, &m.sum.idx_bytes, &m.sum.idx_crc32);
  } catch (...) {
    std::fclose(idx);
    throw;
  }
  close_synced(idx, m.idx_tmp);

  const std::string bin_path = m.prefix + ".bin", idx_path = m.prefix + ".idx";
  FSDP_CHECK(std::rename(m.bin_tmp.c_str(), bin_path.c_str()) == 0, "{}: cannot rename to {} ({})", m.bin_tmp,
             bin_path, errno_text());
  FSDP_CHECK(std::rename(m.idx_tmp.c_str(), idx_path.c_str()) == 0, "{}: cannot rename to {} ({})", m.idx_tmp,
             idx_path, errno_text());
  sync_parent_dir(idx_path);
  m.finished = true;
}

int64_t IndexedDatasetWriter::num_documents() const { return int64_t(impl_->sizes.size()); }
int64_t IndexedDatasetWriter::num_tokens() const { return impl_->tokens; }
const ShardChecksum& IndexedDatasetWriter::checksum() const {
  FSDP_CHECK(impl_->finished, "{}: checksum() before finish()", impl_->prefix);
  return impl_->sum;
}

// ---------------------------------------------------------------------------------------
// Reader

struct IndexedDataset::Impl {
  std::string prefix, idx_path, bin_path;
  Mapping idx, bin;
  uint8_t code = 0;
  int64_t elem = 0;  // bytes per token
  int64_t n = 0;     // sequences
  const unsigned char* sizes = nullptr;
  const unsigned char* pointers = nullptr;
  int64_t tokens = 0;
  mutable std::once_flag max_once;
  mutable int32_t max_token = -1;

  int64_t size(int64_t i) const { return load<int32_t>(sizes + 4 * i); }
  int64_t pointer(int64_t i) const { return load<int64_t>(pointers + 8 * i); }
  void validate();
};

void IndexedDataset::Impl::validate() {
  const std::string& f = idx_path;
  const unsigned char* p = idx.data;
  FSDP_CHECK(idx.size >= kHeaderBytes, "{}: {} bytes, shorter than the {}-byte header (truncated or not an index)", f,
             idx.size, kHeaderBytes);
  FSDP_CHECK(std::memcmp(p, kMagic, sizeof(kMagic)) == 0, "{}: bad magic (not a Megatron indexed dataset)", f);
  const uint64_t version = load<uint64_t>(p + 9);
  FSDP_CHECK(version == kVersion, "{}: index version {}, only version 1 is supported", f, version);
  code = p[17];
  elem = token_bytes(code);
  FSDP_CHECK(elem > 0, "{}: token dtype code {} ({}) is not supported; expected uint8, int16, uint16, int32 or int64",
             f, code, dtype_name(code));
  const uint64_t un = load<uint64_t>(p + 18), um = load<uint64_t>(p + 26);
  // Compare in bytes without overflow: each count is bounded by the file size first.
  const uint64_t body = uint64_t(idx.size - kHeaderBytes);
  FSDP_CHECK(un <= body / 12 && um <= body / 8 && 12 * un + 8 * um == body,
             "{}: {} bytes, but a header with {} sequences and {} document-index entries needs {} "
             "(truncated or corrupt)",
             f, idx.size, un, um,
             un <= body && um <= body ? std::to_string(kHeaderBytes + 12 * un + 8 * um) : std::string("far more"));
  n = int64_t(un);
  const int64_t m = int64_t(um);
  sizes = p + kHeaderBytes;
  pointers = sizes + 4 * n;
  const unsigned char* doc_idx = pointers + 8 * n;

  int64_t expect_ptr = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = size(i);
    FSDP_CHECK(s >= 0, "{}: sequence {} has negative size {}", f, i, s);
    const int64_t ptr = pointer(i);
    FSDP_CHECK(ptr == expect_ptr,
               "{}: sequence {} starts at byte {} of the .bin, but the sizes before it put it at byte {} "
               "(pointers inconsistent with sizes)",
               f, i, ptr, expect_ptr);
    expect_ptr += s * elem;  // at most 2^31 * 8 per sequence, 2^63 overall needs > 2^32 sequences of 2^31
    tokens += s;
  }

  FSDP_CHECK(m >= 1, "{}: empty document index (need at least the leading 0)", f);
  int64_t prev = load<int64_t>(doc_idx);
  FSDP_CHECK(prev == 0, "{}: document index starts at {}, must start at 0", f, prev);
  for (int64_t j = 1; j < m; ++j) {
    const int64_t d = load<int64_t>(doc_idx + 8 * j);
    FSDP_CHECK(d >= prev, "{}: document index entry {} is {}, less than the previous {} (must not decrease)", f, j, d,
               prev);
    prev = d;
  }
  FSDP_CHECK(prev == n, "{}: document index ends at {}, must end at the sequence count {}", f, prev, n);

  FSDP_CHECK(bin.size == expect_ptr, "{}: {} bytes but the index describes {}", bin_path, bin.size, expect_ptr);
}

IndexedDataset::IndexedDataset(const std::string& prefix) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.prefix = prefix;
  m.idx_path = prefix + ".idx";
  m.bin_path = prefix + ".bin";
  m.idx.open(m.idx_path);
  m.bin.open(m.bin_path);
  m.validate();
}

IndexedDataset::~IndexedDataset() = default;
IndexedDataset::IndexedDataset(IndexedDataset&&) noexcept = default;
IndexedDataset& IndexedDataset::operator=(IndexedDataset&&) noexcept = default;

const std::string& IndexedDataset::prefix() const { return impl_->prefix; }
int64_t IndexedDataset::num_documents() const { return impl_->n; }
int64_t IndexedDataset::num_tokens() const { return impl_->tokens; }

int64_t IndexedDataset::document_size(int64_t doc) const {
  FSDP_CHECK(doc >= 0 && doc < impl_->n, "{}: document {} out of range [0, {})", impl_->prefix, doc, impl_->n);
  return impl_->size(doc);
}

void IndexedDataset::read(int64_t doc, int64_t offset, int64_t count, int32_t* out) const {
  const Impl& m = *impl_;
  const int64_t size = document_size(doc);
  FSDP_CHECK(offset >= 0 && count >= 0 && offset <= size && count <= size - offset,
             "{}: read of tokens [{}, {}) from document {} of {} tokens", m.prefix, offset, offset + count, doc, size);
  if (count == 0) return;
  const unsigned char* src = m.bin.data + m.pointer(doc) + offset * m.elem;
  switch (m.code) {
    case kU16:
      for (int64_t i = 0; i < count; ++i) out[i] = load<uint16_t>(src + 2 * i);
      break;
    case kI32: std::memcpy(out, src, size_t(count) * 4); break;
    default:
      for (int64_t i = 0; i < count; ++i) {
        const int64_t v = token_at(src, m.code, i);
        FSDP_CHECK(v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max(),
                   "{}: document {} token {} has id {}, which does not fit in int32", m.bin_path, doc, offset + i, v);
        out[i] = int32_t(v);
      }
  }
}

std::optional<IndexedDataset::TokenAt> IndexedDataset::first_token_outside(int64_t vocab_size) const {
  const Impl& m = *impl_;
  for (int64_t doc = 0; doc < m.n; ++doc) {
    const unsigned char* p = m.bin.data + m.pointer(doc);
    const int64_t size = m.size(doc);
    for (int64_t i = 0; i < size; ++i) {
      const int64_t id = token_at(p, m.code, i);
      if (id < 0 || id >= vocab_size) [[unlikely]]
        return TokenAt{doc, i, id, m.pointer(doc) / m.elem + i};
    }
  }
  return std::nullopt;
}

std::pair<const unsigned char*, int64_t> IndexedDataset::bin_bytes() const { return {impl_->bin.data, impl_->bin.size}; }
std::pair<const unsigned char*, int64_t> IndexedDataset::idx_bytes() const { return {impl_->idx.data, impl_->idx.size}; }

int32_t IndexedDataset::max_token() const {
  const Impl& m = *impl_;
  std::call_once(m.max_once, [&m] {
    int64_t best = -1;
    const int64_t total = m.bin.size / m.elem;
    for (int64_t i = 0; i < total; ++i) best = std::max(best, token_at(m.bin.data, m.code, i));
    FSDP_CHECK(best <= std::numeric_limits<int32_t>::max(), "{}: largest token id {} does not fit in int32",
               m.bin_path, best);
    m.max_token = int32_t(best);
  });
  return m.max_token;
}

}  // namespace fsdp::data
