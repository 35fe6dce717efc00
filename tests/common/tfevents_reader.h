// A reader of TensorBoard event files written apart from the writer (src/train/
// tfrecord.cpp, tf_event.cpp) so that the tests do not check the writer against itself:
// TFRecord framing with both CRCs verified by a bit-at-a-time CRC-32C (the writer uses a
// table), and a generic protobuf wire-format walk of Event / Summary / Value / SessionLog
// (field numbers from tensorboard's compat/proto/event.proto and summary.proto).
// Header-only; used by tests/cpu/test_tensorboard.cpp and the MPI tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace fsdp::test {

inline uint32_t crc32c_bitwise(const std::string& s) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : s) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return ~c;
}

inline uint32_t masked(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xA282EAD8u; }

inline uint64_t le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + size_t(i)]);
  return v;
}

// The records of a TFRecord file; throws std::runtime_error on a bad CRC or a cut record.
inline std::vector<std::string> read_tfrecords(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string b = ss.str();
  std::vector<std::string> out;
  size_t at = 0;
  while (at < b.size()) {
    if (b.size() - at < 12) throw std::runtime_error(path + ": record header cut at offset " + std::to_string(at));
    const uint64_t n = le(b, at, 8);
    if (masked(crc32c_bitwise(b.substr(at, 8))) != uint32_t(le(b, at + 8, 4)))
      throw std::runtime_error(path + ": length CRC mismatch at offset " + std::to_string(at));
    if (b.size() - at - 12 < n + 4) throw std::runtime_error(path + ": record cut at offset " + std::to_string(at));
    std::string data = b.substr(at + 12, n);
    if (masked(crc32c_bitwise(data)) != uint32_t(le(b, at + 12 + n, 4)))
      throw std::runtime_error(path + ": data CRC mismatch at offset " + std::to_string(at));
    out.push_back(std::move(data));
    at += 12 + n + 4;
  }
  return out;
}

// ---- protobuf wire format ----

struct PbField {
  uint32_t number = 0;
  uint32_t type = 0;   // 0 varint, 1 fixed64, 2 bytes, 5 fixed32
  uint64_t value = 0;  // varint / fixed bits
  std::string bytes;   // type 2
};

inline std::vector<PbField> pb_fields(const std::string& m) {
  std::vector<PbField> out;
  size_t at = 0;
  auto varint = [&]() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (at >= m.size() || shift > 63) throw std::runtime_error("bad varint");
      const auto b = static_cast<unsigned char>(m[at++]);
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
  };
  while (at < m.size()) {
    const uint64_t key = varint();
    PbField f;
    f.number = uint32_t(key >> 3);
    f.type = uint32_t(key & 7);
    if (f.type == 0) {
      f.value = varint();
    } else if (f.type == 1 || f.type == 5) {
      const int n = f.type == 1 ? 8 : 4;
      if (m.size() - at < size_t(n)) throw std::runtime_error("cut fixed field");
      f.value = le(m, at, n);
      at += size_t(n);
    } else if (f.type == 2) {
      const uint64_t n = varint();
      if (m.size() - at < n) throw std::runtime_error("cut bytes field");
      f.bytes = m.substr(at, n);
      at += n;
    } else {
      throw std::runtime_error("unexpected wire type " + std::to_string(f.type));
    }
    out.push_back(std::move(f));
  }
  return out;
}

struct TbEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  bool session_start = false;
  std::vector<std::pair<std::string, float>> scalars;
};

inline TbEvent decode_event(const std::string& m) {
  TbEvent e;
  for (const PbField& f : pb_fields(m)) {
    if (f.number == 1 && f.type == 1) std::memcpy(&e.wall_time, &f.value, 8);
    if (f.number == 2 && f.type == 0) e.step = int64_t(f.value);
    if (f.number == 3 && f.type == 2) e.file_version = f.bytes;
    if (f.number == 7 && f.type == 2) {
      for (const PbField& s : pb_fields(f.bytes))
        if (s.number == 1 && s.type == 0 && s.value == 1) e.session_start = true;
    }
    if (f.number == 5 && f.type == 2) {
      for (const PbField& v : pb_fields(f.bytes)) {
        if (v.number != 1 || v.type != 2) continue;
        std::string tag;
        float value = 0;
        bool has_value = false;
        for (const PbField& x : pb_fields(v.bytes)) {
          if (x.number == 1 && x.type == 2) tag = x.bytes;
          if (x.number == 2 && x.type == 5) {
            const auto bits = uint32_t(x.value);
            std::memcpy(&value, &bits, 4);
            has_value = true;
          }
        }
        if (has_value) e.scalars.emplace_back(tag, value);
      }
    }
  }
  return e;
}

// What TensorBoard shows for a directory's files (given in name order, the order it reads
// them): tag -> step -> value, where a SessionLog START at step s first drops every event
// at a step >= s (event_accumulator's purge of orphaned data, file version 2).
inline std::map<std::string, std::map<int64_t, float>> tensorboard_view(const std::vector<std::string>& files) {
  std::map<std::string, std::map<int64_t, float>> view;
  for (const std::string& path : files) {
    for (const std::string& record : read_tfrecords(path)) {
      const TbEvent e = decode_event(record);
      if (e.session_start) {
        for (auto& [tag, steps] : view) steps.erase(steps.lower_bound(e.step), steps.end());
      }
      for (const auto& [tag, v] : e.scalars) view[tag][e.step] = v;
    }
  }
  return view;
}

}  // namespace fsdp::test
