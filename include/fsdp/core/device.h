// Where a tensor's storage lives: the host, or one CUDA device.
#pragma once

#include <string>
#include <string_view>

namespace fsdp {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // meaningful for CUDA only

  static constexpr Device cpu() { return Device{DeviceType::CPU, 0}; }
  static constexpr Device cuda(int i) { return Device{DeviceType::CUDA, i}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu" or "cuda:N"
};

Device parse_device(std::string_view s);  // "cpu", "cuda", "cuda:N"; throws on others

}  // namespace fsdp
