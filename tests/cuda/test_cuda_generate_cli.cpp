// `fsdp_train generate --device cuda` (src/cli/generate_command.cpp) in-process on the golden
// tiny Llama: the weights load on the host and move to the device in the compute dtype, the
// KV-cache decoder runs there, and greedy decoding prints what the CPU prints. (The decoder
// itself is held to the CPU and to transformers in test_cuda_llama_decode.cpp; this is the
// command's own device path.)
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "../common/made_up_tokenizer.h"
#include "cuda_test_util.h"
#include "fsdp/cli/commands.h"

namespace fsdp::test {
namespace {

namespace fs = std::filesystem;

struct Printed {
  int code = -1;
  std::string out;
};

Printed generate(std::vector<std::string> args) {
  args.insert(args.begin(), "generate");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  ::testing::internal::CaptureStdout();
  Printed p;
  p.code = cli::generate_command(int(argv.size()), argv.data());
  p.out = ::testing::internal::GetCapturedStdout();
  return p;
}

TEST_F(CudaOps, GenerateOnTheDevicePrintsWhatTheCpuPrints) {
  const fs::path dir = fs::temp_directory_path() / "fsdp_cuda_generate_cli";
  fs::create_directories(dir);
  const std::string spm = made_up_tokenizer(dir, 96);
  const std::vector<std::string> common = {"--checkpoint", source_path("tests/golden/llama_gqa_tiny"), "--tokenizer",
                                           spm, "--prompt", "kalo mine rusa", "--temperature", "0",
                                           "--max-new-tokens", "10"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = common;
    a.insert(a.end(), extra.begin(), extra.end());
    return generate(a);
  };
  const Printed cpu = with({"--device", "cpu"});
  ASSERT_EQ(cpu.code, 0);
  ASSERT_TRUE(cpu.out.starts_with("kalo mine rusa")) << cpu.out;
  ASSERT_GT(cpu.out.size(), std::string("kalo mine rusa\n").size()) << "no completion";
  const Printed gpu = with({"--device", "cuda", "--dtype", "float32"});
  ASSERT_EQ(gpu.code, 0);
  EXPECT_EQ(gpu.out, cpu.out);
  // bf16 (the GPU's default dtype) runs and continues the prompt; its tokens may differ.
  const Printed bf16 = with({"--device", "cuda"});
  ASSERT_EQ(bf16.code, 0);
  EXPECT_TRUE(bf16.out.starts_with("kalo mine rusa")) << bf16.out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fsdp::test
