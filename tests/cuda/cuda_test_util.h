// Shared by the CUDA op tests (tests/cuda/test_cuda_*.cpp): the fixture that skips
// without a device, host<->device helpers, and the two comparisons the tests state their
// tolerances in: identical bits (with the first differing element), and the normalised mean squared error
// sum((cuda - cpu)^2) / sum(cpu^2) of ggml's test-backend-ops.
#pragma once

#include <gtest/gtest.h>

#include <cstring>

#include "fsdp/core/cuda.h"
#include "test_util.h"

#if defined(FSDP_CUDA_EMULATION)
#include <cuda_runtime.h>  // the emulator's, for fsdpEmuHostBlockingCalls
#endif

namespace fsdp::test {

inline const Device kGpu = Device::cuda(0);
inline const int64_t kSizes[] = {1, 7, 31, 33, 1000, 4099};
inline const DType kFloatTypes[] = {DType::F32, DType::F64, DType::BF16, DType::F16};

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no usable CUDA device";
  }
};

inline Tensor on_device(const Tensor& t, Device d) { return cuda::to_device(t, d); }
inline Tensor on_gpu(const Tensor& t) { return cuda::to_device(t, kGpu); }
inline Tensor on_cpu(const Tensor& t) { return cuda::to_device(t, Device::cpu()); }

inline double nmse(const Tensor& got, const Tensor& want) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double a = got.get_flat(i), b = want.get_flat(i);
    num += (a - b) * (a - b);
    den += b * b;
  }
  return den == 0 ? num : num / den;
}

// Same bytes (NaN payloads included).
inline ::testing::AssertionResult identical(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.numel() != want.numel())
    return ::testing::AssertionFailure() << got.str() << " vs " << want.str();
  const size_t es = want.element_size();
  const auto* a = static_cast<const unsigned char*>(got.data_ptr());
  const auto* b = static_cast<const unsigned char*>(want.data_ptr());
  for (int64_t i = 0; i < want.numel(); ++i)
    if (std::memcmp(a + i * es, b + i * es, es) != 0)
      return ::testing::AssertionFailure() << "element " << i << " of " << want.str() << ": " << got.get_flat(i)
                                           << " vs " << want.get_flat(i);
  return ::testing::AssertionSuccess();
}

// How many calls so far made the host wait for a device: the emulator counts them
// (fsdpEmuHostBlockingCalls); on a GPU the tests that need it skip themselves.
inline bool can_count_host_waits() { return cuda::is_emulated(); }
inline unsigned long long host_waits() {
#if defined(FSDP_CUDA_EMULATION)
  return fsdpEmuHostBlockingCalls();
#else
  return 0;
#endif
}

// Random values in [-2, 2) stored in `dtype` (so the 16-bit inputs are exact on both sides).
inline Tensor input(int64_t n, DType dtype, uint64_t seed) { return random_tensor({n}, DType::F64, seed, -2, 2).to(dtype); }

}  // namespace fsdp::test
