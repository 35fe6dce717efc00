// Protobuf wire encoding of TensorBoard's Event messages (fsdp/obs/tf_event.h): a field
// is a key varint (field number << 3 | wire type), then a varint (type 0), 8 little-endian
// bytes (type 1), a length varint and the bytes (type 2), or 4 little-endian bytes (type 5).
#include "fsdp/obs/tf_event.h"

#include <cstring>

namespace fsdp::obs::tf_event {
namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += char((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += char(v);
}

void key(std::string& out, uint32_t field, WireType type) { varint(out, (uint64_t(field) << 3) | type); }

void fixed(std::string& out, uint64_t bits, int bytes) {
  for (int i = 0; i < bytes; ++i) out += char((bits >> (8 * i)) & 0xFF);
}

void double_field(std::string& out, uint32_t field, double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(v));
  key(out, field, kFixed64);
  fixed(out, bits, 8);
}

void float_field(std::string& out, uint32_t field, float v) {
  uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof(v));
  key(out, field, kFixed32);
  fixed(out, bits, 4);
}

void bytes_field(std::string& out, uint32_t field, const std::string& bytes) {
  key(out, field, kBytes);
  varint(out, bytes.size());
  out += bytes;
}

// Event fields.
constexpr uint32_t kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5, kSessionLog = 7;

std::string event_head(double wall_time, int64_t step) {
  std::string e;
  double_field(e, kWallTime, wall_time);
  if (step != 0) {  // proto3 omits a zero scalar
    key(e, kStep, kVarint);
    varint(e, uint64_t(step));
  }
  return e;
}

}  // namespace

std::string file_version(double wall_time) {
  std::string e = event_head(wall_time, 0);
  bytes_field(e, kFileVersion, "brain.Event:2");
  return e;
}

std::string session_start(double wall_time, int64_t step) {
  std::string log;
  key(log, 1, kVarint);  // SessionLog.status
  varint(log, 1);        // START
  std::string e = event_head(wall_time, step);
  bytes_field(e, kSessionLog, log);
  return e;
}

std::string scalars(double wall_time, int64_t step, const std::vector<std::pair<std::string, float>>& values) {
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    bytes_field(value, 1, tag);  // Value.tag
    float_field(value, 2, v);    // Value.simple_value
    bytes_field(summary, 1, value);  // Summary.value
  }
  std::string e = event_head(wall_time, step);
  bytes_field(e, kSummary, summary);
  return e;
}

}  // namespace fsdp::obs::tf_event
