// The TCP store's frames; see store_wire.h.
#include "store_wire.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace fsdp::dist::wire {

std::string frame(Type type, const std::string& payload) {
  std::string out(kHeaderBytes, '\0');
  const uint32_t magic = kMagic;
  const uint64_t n = payload.size();
  std::memcpy(out.data(), &magic, 4);
  out[4] = char(type);
  std::memcpy(out.data() + 5, &n, 8);
  out += payload;
  return out;
}

bool FrameBuffer::pop(Type* type, std::string* payload, bool* bad) {
  *bad = false;
  if (data_.size() < kHeaderBytes) return false;
  uint32_t magic = 0;
  uint64_t n = 0;
  std::memcpy(&magic, data_.data(), 4);
  std::memcpy(&n, data_.data() + 5, 8);
  const auto t = uint8_t(data_[4]);
  if (magic != kMagic || n > kMaxPayload || t < kHello || t > kByeAck) {
    *bad = true;
    return false;
  }
  if (data_.size() < kHeaderBytes + n) return false;
  *type = Type(t);
  payload->assign(data_, kHeaderBytes, size_t(n));
  data_.erase(0, kHeaderBytes + size_t(n));
  return true;
}

bool write_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += size_t(n);
  }
  return true;
}

std::string address(const std::string& host, int port) {
  return host.find(':') != std::string::npos ? "[" + host + "]:" + std::to_string(port)
                                             : host + ":" + std::to_string(port);
}

}  // namespace fsdp::dist::wire
