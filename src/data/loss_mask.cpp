// The loss-mask sidecar (layout in include/fsdp/data/loss_mask.h).
//
// Writer: the body streams into <prefix>.mask.tmp behind a header written with N = 0 and
// rewritten at finish() once N is known; the file's CRC-32 is the header's combined with
// the body's (zlib's crc32_combine), so nothing is read back.
#include "fsdp/data/loss_mask.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <zlib.h>

#include "fsdp/core/error.h"
#include "fsdp/core/regular_file.h"

namespace fsdp::data {

namespace {

constexpr char kMagic[8] = {'F', 'S', 'D', 'P', 'M', 'A', 'S', 'K'};
constexpr uint64_t kVersion = 1;

std::string errno_text() { return std::strerror(errno); }

void header(unsigned char* out, uint64_t tokens) {
  std::memcpy(out, kMagic, 8);
  std::memcpy(out + 8, &kVersion, 8);
  std::memcpy(out + 16, &tokens, 8);
}

}  // namespace

struct LossMaskWriter::Impl {
  std::string path, tmp;
  std::FILE* f = nullptr;
  int64_t tokens = 0, trained = 0, bytes = 0;
  uint32_t body_crc = uint32_t(::crc32(0, nullptr, 0)), crc = 0;
  bool finished = false;
};

LossMaskWriter::LossMaskWriter(std::string prefix) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = prefix + ".mask";
  m.tmp = m.path + ".tmp";
  m.f = std::fopen(m.tmp.c_str(), "wb");
  FSDP_CHECK(m.f != nullptr, "{}: cannot create ({})", m.tmp, errno_text());
  unsigned char h[kLossMaskHeaderBytes];
  header(h, 0);
  FSDP_CHECK(std::fwrite(h, 1, sizeof h, m.f) == sizeof h, "{}: write failed ({})", m.tmp, errno_text());
}

LossMaskWriter::~LossMaskWriter() {
  if (!impl_ || impl_->finished) return;
  if (impl_->f != nullptr) std::fclose(impl_->f);
  std::remove(impl_->tmp.c_str());
}

void LossMaskWriter::add(const uint8_t* mask, int64_t count) {
  Impl& m = *impl_;
  FSDP_CHECK(!m.finished && count >= 0, "{}: add after finish", m.path);
  for (int64_t i = 0; i < count; ++i) {
    FSDP_CHECK(mask[i] <= 1, "{}: mask value {} at token {} is neither 0 nor 1", m.path, int(mask[i]), m.tokens + i);
    m.trained += mask[i];
  }
  FSDP_CHECK(count == 0 || std::fwrite(mask, 1, size_t(count), m.f) == size_t(count), "{}: write failed ({})", m.tmp,
             errno_text());
  m.body_crc = uint32_t(::crc32_z(m.body_crc, mask, size_t(count)));
  m.tokens += count;
}

void LossMaskWriter::finish() {
  Impl& m = *impl_;
  if (m.finished) return;
  unsigned char h[kLossMaskHeaderBytes];
  header(h, uint64_t(m.tokens));
  std::FILE* f = m.f;
  m.f = nullptr;
  bool ok = std::fseek(f, 0, SEEK_SET) == 0 && std::fwrite(h, 1, sizeof h, f) == sizeof h && std::fflush(f) == 0 &&
            ::fsync(::fileno(f)) == 0;
  const std::string why = ok ? "" : errno_text();
  ok = std::fclose(f) == 0 && ok;
  FSDP_CHECK(ok, "{}: cannot write to disk ({})", m.tmp, why.empty() ? errno_text() : why);
  std::error_code ec;
  std::filesystem::rename(m.tmp, m.path, ec);
  FSDP_CHECK(!ec, "{}: cannot rename from {}: {}", m.path, m.tmp, ec.message());
  const uint32_t head = uint32_t(::crc32(0, h, sizeof h));
  m.crc = uint32_t(::crc32_combine(head, m.body_crc, z_off_t(m.tokens)));
  m.bytes = kLossMaskHeaderBytes + m.tokens;
  m.finished = true;
}

int64_t LossMaskWriter::num_tokens() const { return impl_->tokens; }
int64_t LossMaskWriter::trained_tokens() const { return impl_->trained; }
int64_t LossMaskWriter::file_bytes() const { return impl_->bytes; }
uint32_t LossMaskWriter::file_crc32() const { return impl_->crc; }

struct LossMask::Impl {
  std::string path;
  const unsigned char* data = nullptr;
  int64_t size = 0, tokens = 0;
  ~Impl() {
    if (data != nullptr) ::munmap(const_cast<unsigned char*>(data), size_t(size));
  }
};

LossMask::LossMask(const std::string& prefix, int64_t expected_tokens) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = prefix + ".mask";
  const int fd = open_regular_file(m.path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    FSDP_FAIL("{}: cannot stat ({})", m.path, why);
  }
  m.size = int64_t(st.st_size);
  if (m.size > 0) {
    void* p = ::mmap(nullptr, size_t(m.size), PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const std::string why = errno_text();
      ::close(fd);
      FSDP_FAIL("{}: cannot mmap {} bytes ({})", m.path, m.size, why);
    }
    m.data = static_cast<const unsigned char*>(p);
  }
  ::close(fd);
  FSDP_CHECK(m.size >= kLossMaskHeaderBytes && std::memcmp(m.data, kMagic, 8) == 0,
             "loss mask {}: not a mask file (no FSDPMASK header; {} bytes)", m.path, m.size);
  uint64_t version = 0, tokens = 0;
  std::memcpy(&version, m.data + 8, 8);
  std::memcpy(&tokens, m.data + 16, 8);
  FSDP_CHECK(version == kVersion, "loss mask {}: version {} (this build reads {})", m.path, version, kVersion);
  FSDP_CHECK(tokens == uint64_t(expected_tokens) && m.size == kLossMaskHeaderBytes + expected_tokens,
             "loss mask {}: holds {} tokens in {} bytes, but its shard has {} tokens (the mask belongs to another "
             "shard, or is truncated)",
             m.path, tokens, m.size, expected_tokens);
  m.tokens = expected_tokens;
}

LossMask::~LossMask() = default;
LossMask::LossMask(LossMask&&) noexcept = default;
LossMask& LossMask::operator=(LossMask&&) noexcept = default;

const std::string& LossMask::path() const { return impl_->path; }

void LossMask::read(int64_t first, int64_t count, uint8_t* out) const {
  const Impl& m = *impl_;
  FSDP_CHECK(first >= 0 && count >= 0 && first + count <= m.tokens, "loss mask {}: tokens [{}, {}) outside [0, {})",
             m.path, first, first + count, m.tokens);
  const unsigned char* p = m.data + kLossMaskHeaderBytes + first;
  std::memcpy(out, p, size_t(count));
  for (int64_t i = 0; i < count; ++i) {
    if (out[i] > 1) [[unlikely]]
      FSDP_FAIL("loss mask {}: byte {} of token {} is neither 0 nor 1 (the file is corrupt)", m.path, int(out[i]),
                first + i);
  }
}

std::pair<const unsigned char*, int64_t> LossMask::bytes() const { return {impl_->data, impl_->size}; }

bool has_loss_mask(const std::string& prefix) {
  std::error_code ec;
  return std::filesystem::exists(prefix + ".mask", ec);
}

}  // namespace fsdp::data
