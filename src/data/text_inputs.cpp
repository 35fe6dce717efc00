#include "fsdp/data/text_inputs.h"

#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include <nlohmann/json.hpp>

#include "fsdp/core/error.h"
#include "fsdp/core/regular_file.h"

namespace fsdp::data {

namespace {

bool ends_with(const std::string& s, std::string_view suffix) { return s.ends_with(suffix); }

std::string strip_compression(const std::string& path) {
  for (std::string_view ext : {".gz", ".zst"}) {
    if (ends_with(path, ext)) return path.substr(0, path.size() - ext.size());
  }
  return path;
}

bool is_blank(std::string_view line) {
  for (char c : line) {
    if (c != ' ' && c != '\t' && c != '\r' && c != '\f' && c != '\v') return false;
  }
  return true;
}

constexpr size_t kReadChunk = size_t(1) << 20;

}  // namespace

InputFormat input_format(const std::string& path) {
  const std::string base = strip_compression(path);
  if (ends_with(base, ".txt")) return InputFormat::kText;
  // .json too: SageMaker model parallel's shards are JSON Lines named .json.gz.
  if (ends_with(base, ".jsonl") || ends_with(base, ".json")) return InputFormat::kJsonl;
  FSDP_FAIL("input '{}': unknown format (expected .txt, .jsonl or .json (JSON Lines), optionally followed by .gz or "
            ".zst)",
            path);
}

// ---- Byte sources ---------------------------------------------------------------------

class InputReader::Source {
 public:
  virtual ~Source() = default;
  // Up to cap bytes into dst; 0 at the end. Throws fsdp::Error on a read error or
  // corrupt data.
  virtual size_t read(char* dst, size_t cap) = 0;
};

namespace {

// A regular file only: a FIFO (or /dev/zero) given to prepare would block or never end.
std::FILE* open_input(const std::string& path) {
  std::string why;
  const int fd = open_regular_file(path, why);
  if (fd < 0) FSDP_FAIL("cannot open input '{}': {}", path, why);
  std::FILE* f = ::fdopen(fd, "rb");
  if (f == nullptr) {
    ::close(fd);
    FSDP_FAIL("cannot open input '{}': {}", path, std::strerror(errno));
  }
  return f;
}

class PlainSource : public InputReader::Source {
 public:
  explicit PlainSource(const std::string& path) : path_(path), f_(open_input(path)) {}
  ~PlainSource() override { std::fclose(f_); }
  size_t read(char* dst, size_t cap) override {
    const size_t n = std::fread(dst, 1, cap, f_);
    if (n == 0 && std::ferror(f_)) FSDP_FAIL("cannot read input '{}': {}", path_, std::strerror(errno));
    return n;
  }

 private:
  std::string path_;
  std::FILE* f_;
};

class GzipSource : public InputReader::Source {
 public:
  explicit GzipSource(const std::string& path) : path_(path) {
    // zlib reads the descriptor of the checked regular file (gzopen would open a FIFO and
    // wait on it; gzclose closes the descriptor).
    std::string why;
    const int fd = open_regular_file(path, why);
    if (fd < 0) FSDP_FAIL("cannot open input '{}': {}", path, why);
    gz_ = gzdopen(fd, "rb");
    if (gz_ == nullptr) {
      ::close(fd);
      FSDP_FAIL("cannot open input '{}' with zlib", path);
    }
    gzbuffer(gz_, 1 << 18);
  }
  ~GzipSource() override { gzclose(gz_); }
  size_t read(char* dst, size_t cap) override {
    const int n = gzread(gz_, dst, unsigned(std::min<size_t>(cap, size_t(1) << 30)));
    int err = Z_OK;
    const char* msg = gzerror(gz_, &err);
    if (n < 0 || (err != Z_OK && err != Z_STREAM_END)) {
      FSDP_FAIL("input '{}' is not a readable gzip stream (corrupt or truncated): {}", path_, msg);
    }
    // zlib reads a file without a gzip header as is; a .gz that is not gzip is an error.
    if (n > 0 && !checked_direct_) {
      checked_direct_ = true;
      if (gzdirect(gz_)) FSDP_FAIL("input '{}' is not gzip-compressed (no gzip header)", path_);
    }
    return size_t(n);
  }

 private:
  std::string path_;
  gzFile gz_ = nullptr;
  bool checked_direct_ = false;
};

class ZstdSource : public InputReader::Source {
 public:
  explicit ZstdSource(const std::string& path)
      : path_(path), f_(open_input(path)), dctx_(ZSTD_createDCtx()), inbuf_(ZSTD_DStreamInSize()) {
    FSDP_CHECK(dctx_ != nullptr, "ZSTD_createDCtx failed");
  }
  ~ZstdSource() override {
    ZSTD_freeDCtx(dctx_);
    if (f_ != nullptr) std::fclose(f_);
  }
  size_t read(char* dst, size_t cap) override {
    ZSTD_outBuffer out{dst, cap, 0};
    while (true) {
      if (in_.pos == in_.size && !eof_) {
        const size_t n = std::fread(inbuf_.data(), 1, inbuf_.size(), f_);
        if (n == 0 && std::ferror(f_)) FSDP_FAIL("cannot read input '{}': {}", path_, std::strerror(errno));
        if (n == 0) eof_ = true;
        in_ = ZSTD_inBuffer{inbuf_.data(), n, 0};
      }
      const size_t in_before = in_.pos, out_before = out.pos;
      const size_t r = ZSTD_decompressStream(dctx_, &out, &in_);
      if (ZSTD_isError(r)) FSDP_FAIL("input '{}' is not a readable zstd stream: {}", path_, ZSTD_getErrorName(r));
      // After a frame ends, a call with no input asks for the next frame's header (r > 0):
      // only a call that made progress says whether the last frame is complete.
      if (in_.pos != in_before || out.pos != out_before) frame_pending_ = r;
      if (out.pos > 0) return out.pos;
      if (eof_ && in_.pos == in_.size) {
        if (frame_pending_ != 0) FSDP_FAIL("input '{}' is a truncated zstd stream (the last frame is incomplete)", path_);
        return 0;
      }
    }
  }

 private:
  std::string path_;
  std::FILE* f_;
  ZSTD_DCtx* dctx_;
  std::vector<char> inbuf_;
  ZSTD_inBuffer in_{nullptr, 0, 0};
  bool eof_ = false;
  size_t frame_pending_ = 0;
};

}  // namespace

// ---- InputReader ----------------------------------------------------------------------

InputReader::InputReader(const std::string& path, int64_t max_line_bytes)
    : path_(path), format_(input_format(path)), max_line_bytes_(max_line_bytes) {
  FSDP_CHECK(max_line_bytes >= 1, "--max-line-bytes must be >= 1, got {}", max_line_bytes);
  if (ends_with(path, ".gz")) source_ = std::make_unique<GzipSource>(path);
  else if (ends_with(path, ".zst")) source_ = std::make_unique<ZstdSource>(path);
  else source_ = std::make_unique<PlainSource>(path);
}

InputReader::~InputReader() = default;

bool InputReader::fill() {
  buf_.erase(0, pos_);
  pos_ = 0;
  const size_t old = buf_.size();
  buf_.resize(old + kReadChunk);
  const size_t n = source_->read(buf_.data() + old, kReadChunk);
  buf_.resize(old + n);
  bytes_ += int64_t(n);
  if (n == 0) eof_ = true;
  return n > 0;
}

bool InputReader::next_line(std::string& line, bool* too_long) {
  *too_long = false;
  size_t scanned = pos_;  // bytes before it hold no '\n'
  while (true) {
    const size_t nl = buf_.find('\n', scanned);
    if (nl != std::string::npos && int64_t(nl - pos_) <= max_line_bytes_) {
      line.assign(buf_, pos_, nl - pos_);
      pos_ = nl + 1;
      break;
    }
    if (nl != std::string::npos || int64_t(buf_.size() - pos_) > max_line_bytes_) {
      // Over the limit: drop what is buffered and every chunk up to the line's end, so
      // memory stays bounded by the limit whatever the line's length.
      *too_long = true;
      line.clear();
      size_t end = nl;
      while (end == std::string::npos) {
        pos_ = buf_.size();
        if (!fill()) break;
        end = buf_.find('\n', pos_);
      }
      pos_ = end == std::string::npos ? buf_.size() : end + 1;
      break;
    }
    if (eof_) {
      if (pos_ >= buf_.size()) return false;
      line.assign(buf_, pos_);  // a last line without '\n'
      pos_ = buf_.size();
      break;
    }
    scanned = buf_.size() - pos_;
    fill();
    scanned += pos_;  // fill() moved the unread bytes to the front
  }
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (++line_no_ == 1 && line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);  // UTF-8 BOM
  return true;
}

bool InputReader::next(RawDocument& doc) {
  std::string line;
  bool too_long = false;
  doc.raw.clear();
  doc.too_long = false;
  if (pending_too_long_ > 0) {  // a text file's over-long line, after the paragraph it ended
    doc.line = std::exchange(pending_too_long_, 0);
    doc.too_long = true;
    return true;
  }
  if (format_ == InputFormat::kJsonl) {
    while (next_line(line, &too_long)) {
      if (!too_long && is_blank(line)) continue;
      doc.line = line_no_;
      doc.raw = std::move(line);
      doc.too_long = too_long;
      return true;
    }
    return false;
  }
  while (next_line(line, &too_long)) {
    if (too_long) {
      if (doc.raw.empty()) {
        doc.line = line_no_;
        doc.too_long = true;
        return true;
      }
      pending_too_long_ = line_no_;
      return true;
    }
    if (is_blank(line)) {
      if (!doc.raw.empty()) return true;
      continue;
    }
    if (doc.raw.empty()) {
      doc.line = line_no_;
    } else {
      doc.raw += '\n';
    }
    doc.raw += line;
  }
  return !doc.raw.empty();
}

// ---- UTF-8 ------------------------------------------------------------------------------

// Unicode's table 3-7 of well-formed byte sequences.
size_t first_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) len = 3;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    else return i;
    if (i + len > n || s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
    i += len;
  }
  return std::string_view::npos;
}

// ---- JSONL lines ------------------------------------------------------------------------

ParsedLine parse_jsonl_line(std::string_view line, const std::string& text_field, int64_t vocab_size) {
  using nlohmann::json;
  ParsedLine out;
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for 1e3083 (found by fuzz_prepare_jsonl)
    out.kind = ParsedLine::Kind::kMalformed;
    std::string what = e.what();
    if (const size_t p = what.find("] "); p != std::string::npos) what.erase(0, p + 2);
    out.error = "malformed JSON: " + what;
    return out;
  }
  if (!j.is_object()) {
    out.kind = ParsedLine::Kind::kMalformed;
    out.error = std::string("malformed line: a JSON ") + j.type_name() + ", not an object";
    return out;
  }
  if (auto it = text_field.empty() ? j.end() : j.find(text_field); it != j.end()) {
    if (!it->is_string()) {
      out.kind = ParsedLine::Kind::kInvalid;
      out.error = fmt::format("field '{}' is a {}, not a string", text_field, it->type_name());
      return out;
    }
    out.kind = ParsedLine::Kind::kText;
    out.text = it->get<std::string>();
    return out;
  }
  if (auto it = j.find("input_ids"); it != j.end()) {
    out.kind = ParsedLine::Kind::kInvalid;
    if (!it->is_array()) {
      out.error = fmt::format("'input_ids' is a {}, not an array of token ids", it->type_name());
      return out;
    }
    out.tokens.reserve(it->size());
    for (size_t i = 0; i < it->size(); ++i) {
      const json& v = (*it)[i];
      if (!v.is_number_integer()) {
        out.error = fmt::format("input_ids[{}] is {}, not an integer token id", i, v.dump());
        return out;
      }
      const int64_t id = v.is_number_unsigned() ? int64_t(std::min<uint64_t>(v.get<uint64_t>(), uint64_t(INT64_MAX)))
                                                : v.get<int64_t>();
      if (id < 0 || id >= vocab_size) {
        out.error = fmt::format("input_ids[{}] = {} is outside the vocabulary [0, {})", i, id, vocab_size);
        return out;
      }
      out.tokens.push_back(int32_t(id));
    }
    out.kind = ParsedLine::Kind::kTokens;
    return out;
  }
  out.kind = ParsedLine::Kind::kInvalid;
  std::string keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys += (keys.empty() ? "" : ", ") + it.key();
  if (text_field.empty()) {
    out.error = fmt::format("no 'input_ids' (the object has: {}); without a tokenizer (--vocab-size) prepare takes "
                            "only pre-tokenized lines",
                            keys.empty() ? "no fields" : keys);
  } else {
    out.error = fmt::format("no '{}' field and no 'input_ids' (the object has: {}); --text-field names another field",
                            text_field, keys.empty() ? "no fields" : keys);
  }
  return out;
}

}  // namespace fsdp::data
