#include "fsdp/obs/device_peak.h"

#include <cstdlib>
#include <string_view>

#include "fsdp/core/error.h"

namespace fsdp::obs {

std::optional<double> peak_bf16_flops(const std::string& device_name) {
  if (const char* env = std::getenv("FSDP_PEAK_TFLOPS"); env != nullptr && env[0] != '\0') {
    char* end = nullptr;
    const double tf = std::strtod(env, &end);
    FSDP_CHECK(end != env && *end == '\0' && tf > 0, "FSDP_PEAK_TFLOPS must be a positive number of TFLOP/s, got '{}'",
               env);
    return tf * 1e12;
  }
  // First match wins: the more specific names come first ("H100 PCIe" before "H100").
  struct Row {
    std::string_view part;
    double tflops;
  };
  static constexpr Row kTable[] = {
      {"GH200", 989}, {"H200", 989},  {"H100 PCIe", 756}, {"H100 NVL", 835}, {"H100", 989}, {"H800", 989},
      {"B200", 2250}, {"A100", 312},  {"A800", 312},      {"L40S", 362},     {"L40", 181},  {"A6000", 155},
      {"L4", 121},    {"A10G", 70},   {"A10", 125},       {"V100", 125},
  };
  for (const Row& r : kTable)
    if (device_name.find(r.part) != std::string::npos) return r.tflops * 1e12;
  return std::nullopt;
}

}  // namespace fsdp::obs
