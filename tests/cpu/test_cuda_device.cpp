// A CUDA tensor on a machine without a GPU (or in a build without the CUDA backend)
// must fail with one clear message naming the device, never crash.
#include <gtest/gtest.h>

#include "fsdp/core/tensor.h"

namespace fsdp {
namespace {

TEST(CudaDevice, AllocationNamesTheDeviceWhenItCannotSucceed) {
  try {
    Tensor t = Tensor::empty({16}, DType::F32, Device::cuda(0));
    // A machine with a GPU: the storage is real device memory, accounted for.
    EXPECT_TRUE(t.device().is_cuda());
    EXPECT_GE(allocator_for(Device::cuda(0)).stats().current_bytes, 64u);
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
#ifdef FSDP_WITH_CUDA
    EXPECT_EQ(msg.find("built without the CUDA backend"), std::string::npos) << msg;
#else
    EXPECT_NE(msg.find("built without the CUDA backend"), std::string::npos) << msg;
#endif
  }
}

TEST(CudaDevice, ParseDevice) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_EQ(parse_device("cuda:3"), Device::cuda(3));
  EXPECT_EQ(parse_device("cuda"), Device::cuda(0));
  EXPECT_THROW(parse_device("gpu0"), Error);
  EXPECT_THROW(parse_device("cuda:-1"), Error);
  EXPECT_EQ(Device::cuda(2).str(), "cuda:2");
}

}  // namespace
}  // namespace fsdp
