// Private to src/dist: the TCP store's wire format (fsdp/dist/tcp_store.h), shared by its
// server and client. A frame is
//   u32 magic "fsdp" | u8 type | u64 payload length | payload
// and a payload is a sequence of int64s and length-prefixed strings (Writer / Reader), in the
// machine's byte order: every rank of a job runs the same binary on the same architecture.
// The magic makes a peer that speaks something else (another service on MASTER_PORT) fail
// the first frame instead of being misread.
#pragma once

#include <cstdint>
#include <string>

namespace fsdp::dist::wire {

enum Type : uint8_t {
  kHello = 1,      // client: job, world size, rank, host, pid
  kWelcome,        // server: joined
  kRefused,        // server: exit code, line (the join was refused; the job ends)
  kGather,         // client: ticket, key, group size, group rank, bytes
  kGathered,       // server: ticket, n, n byte strings in group-rank order
  kAbort,          // client: exit code, line
  kAborted,        // server: exit code, line (every rank logs it and exits)
  kWatchdogSend,   // client: to world rank, payload
  kWatchdogRecv,   // server: from world rank, payload
  kBye,            // client: a clean exit
  kByeAck,         // server: every rank has said bye
};

constexpr uint32_t kMagic = 0x70647366;  // "fsdp" read as little-endian bytes
constexpr size_t kHeaderBytes = 4 + 1 + 8;
constexpr uint64_t kMaxPayload = uint64_t(1) << 31;  // far above any gather fsdp_train makes

struct Writer {
  std::string out;
  Writer& i64(int64_t v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  Writer& str(const std::string& s) {
    i64(int64_t(s.size()));
    out += s;
    return *this;
  }
};

struct Reader {
  const std::string& in;
  size_t pos = 0;
  bool ok = true;
  int64_t i64() {
    int64_t v = 0;
    if (pos + sizeof v > in.size()) {
      ok = false;
      return 0;
    }
    in.copy(reinterpret_cast<char*>(&v), sizeof v, pos);
    pos += sizeof v;
    return v;
  }
  std::string str() {
    const int64_t n = i64();
    if (!ok || n < 0 || pos + size_t(n) > in.size()) {
      ok = false;
      return {};
    }
    std::string s = in.substr(pos, size_t(n));
    pos += size_t(n);
    return s;
  }
};

// The bytes of one frame.
std::string frame(Type type, const std::string& payload);

// Frames arriving in pieces: append what was read, pop whole frames.
class FrameBuffer {
 public:
  void append(const char* data, size_t n) { data_.append(data, n); }
  // True with the next whole frame; false when more bytes are needed. *bad: the bytes are
  // not a frame of this protocol (wrong magic, absurd length).
  bool pop(Type* type, std::string* payload, bool* bad);

 private:
  std::string data_;
};

// Writes all of it to a blocking socket (retrying EINTR); false when the peer is gone.
bool write_all(int fd, const std::string& bytes);

// "h:p" for messages.
std::string address(const std::string& host, int port);

}  // namespace fsdp::dist::wire
