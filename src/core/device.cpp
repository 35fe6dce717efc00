#include "fsdp/core/device.h"

#include <charconv>

#include "fsdp/core/error.h"

namespace fsdp {

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Device parse_device(std::string_view s) {
  if (s == "cpu") return Device::cpu();
  if (s == "cuda") return Device::cuda(0);
  if (s.starts_with("cuda:")) {
    int idx = -1;
    auto rest = s.substr(5);
    auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), idx);
    if (ec == std::errc() && p == rest.data() + rest.size() && idx >= 0) return Device::cuda(idx);
  }
  FSDP_FAIL("unknown device '{}' (expected cpu, cuda or cuda:N)", s);
}

}  // namespace fsdp
