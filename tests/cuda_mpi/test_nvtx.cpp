// NVTX ranges (fsdp/core/nvtx.h): in the emulation build the recorder sees every range with
// its nesting, and the NCCL communicator opens one named range per collective it enqueues
// (none for zero-element collectives, which enqueue nothing). Elsewhere the ranges go to
// nvtx3 (a GPU build) and only compile here.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda_mpi_test_env.h"
#include "fsdp/core/cuda.h"
#include "fsdp/core/nvtx.h"

namespace fsdp::nvtx {
namespace {

#if defined(FSDP_NVTX_RECORDER)
std::vector<std::string> names() {
  std::vector<std::string> out;
  for (const RecordedRange& r : recorded_ranges()) out.push_back(r.name + "@" + std::to_string(r.depth));
  return out;
}

TEST(Nvtx, RangesNestAndCloseInScopeOrder) {
  clear_recorded_ranges();
  EXPECT_EQ(open_ranges(), 0);
  {
    FSDP_NVTX_RANGE("step");
    {
      FSDP_NVTX_RANGE("block forward");
      FSDP_NVTX_RANGE("attention");
      EXPECT_EQ(open_ranges(), 3);
    }
    const std::string dynamic = "block backward " + std::to_string(7);
    Range r(dynamic.c_str());  // the name is copied when the range opens
    const std::vector<RecordedRange> open = recorded_ranges();
    ASSERT_EQ(open.size(), 4u);
    EXPECT_TRUE(open[1].closed && open[2].closed);
    EXPECT_FALSE(open[0].closed || open[3].closed);
  }
  EXPECT_EQ(names(), (std::vector<std::string>{"step@0", "block forward@1", "attention@2", "block backward 7@1"}));
  for (const RecordedRange& r : recorded_ranges()) EXPECT_TRUE(r.closed) << r.name;
  EXPECT_EQ(open_ranges(), 0);
  EXPECT_EQ(dropped_ranges(), 0u);
}

// A clear while a range is open: that range is no longer listed, and closing it later
// does not mark a range recorded after the clear.
TEST(Nvtx, ClearWhileOpenForgetsTheOpenRange) {
  clear_recorded_ranges();
  {
    FSDP_NVTX_RANGE("outer");
    clear_recorded_ranges();
    { FSDP_NVTX_RANGE("inner"); }
    FSDP_NVTX_RANGE("open");
    EXPECT_EQ(names(), (std::vector<std::string>{"inner@1", "open@1"}));
  }
  const std::vector<RecordedRange> r = recorded_ranges();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_TRUE(r[0].closed);
  EXPECT_TRUE(r[1].closed);
  EXPECT_EQ(open_ranges(), 0);
}

TEST(Nvtx, NcclCollectivesOpenANamedRangeEach) {
  if (!test::cuda_usable()) GTEST_SKIP() << "needs a CUDA device per rank on the node";
  dist::NcclCommunicator& nccl = test::nccl_world();
  const Device gpu = Device::cuda(test::rank_device());
  const Tensor shard = cuda::to_device(Tensor::zeros({3}, DType::F32), gpu);
  const Tensor full = cuda::to_device(Tensor::zeros({3 * nccl.size()}, DType::F32), gpu);
  clear_recorded_ranges();
  {
    FSDP_NVTX_RANGE("unit 0 backward");
    nccl.wait(nccl.all_gather(shard, full));
    nccl.wait(nccl.reduce_scatter(full, shard));
  }
  nccl.wait(nccl.all_reduce(shard));
  nccl.wait(nccl.broadcast(shard, 0));
  nccl.wait(nccl.all_reduce(Tensor::empty({0}, DType::F32, gpu)));  // enqueues nothing: no range
  const std::vector<int64_t> ones(size_t(nccl.size()), 1);
  nccl.wait(nccl.all_to_all_v(full.narrow(0, 0, nccl.size()), ones, full.narrow(0, nccl.size(), nccl.size()), ones));
  EXPECT_EQ(names(), (std::vector<std::string>{"unit 0 backward@0", "nccl all_gather (group 'world')@1",
                                               "nccl reduce_scatter (group 'world')@1",
                                               "nccl all_reduce (group 'world')@0", "nccl broadcast (group 'world')@0",
                                               "nccl all_to_all_v (group 'world')@0"}));
  for (const RecordedRange& r : recorded_ranges()) EXPECT_TRUE(r.closed) << r.name;
}
#else
TEST(Nvtx, RangesCompileToNvtx3) {
  FSDP_NVTX_RANGE("step");
  Range r("nested");
  SUCCEED();
}
#endif

}  // namespace
}  // namespace fsdp::nvtx
