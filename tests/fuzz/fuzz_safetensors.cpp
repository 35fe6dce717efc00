// Fuzz target: the safetensors reader (ckpt::SafetensorsFile: the 8-byte length, the JSON
// header, the tensor table and its offsets; then SafetensorsFolder over a folder holding
// it as model.safetensors), and every tensor it accepts read in full as the importer
// converts it, so an entry pointing past the file's mapping faults here.
// Property of an accepted entry: its byte count is its shape's elements times its dtype's size.
#include <vector>

#include "fsdp/ckpt/safetensors.h"
#include "fsdp/core/error.h"
#include "fuzz_util.h"

namespace {

void read_every_tensor(const fsdp::ckpt::SafetensorsFile& file) {
  for (const std::string& name : file.names()) {
    const fsdp::ckpt::TensorEntry& e = file.entry(name);
    FUZZ_EXPECT(e.nbytes == size_t(e.numel()) * fsdp::ckpt::safetensors_dtype_size(e.dtype));
    if (e.dtype == "F32" || e.dtype == "BF16" || e.dtype == "F16" || e.dtype == "F64") {
      std::vector<float> out(size_t(e.numel()));
      fsdp::ckpt::read_as_f32(e, out.data());
    } else if (e.dtype == "I64" || e.dtype == "I32") {
      std::vector<int64_t> out(size_t(e.numel()));
      fsdp::ckpt::read_as_i64(e, out.data());
    } else {
      volatile uint8_t sum = 0;  // every byte, whatever the dtype
      for (size_t i = 0; i < e.nbytes; ++i) sum = uint8_t(sum + uint8_t(e.data[i]));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto dir = fsdp::fuzz::scratch_dir() / "model";
  std::filesystem::create_directories(dir);
  const auto path = dir / "model.safetensors";
  fsdp::fuzz::write_file(path, data, size);
  try {
    const fsdp::ckpt::SafetensorsFile file(path.string());
    read_every_tensor(file);
  } catch (const fsdp::Error&) {
  }
  try {
    const fsdp::ckpt::SafetensorsFolder folder(dir.string());
    for (const std::string& name : folder.names()) (void)folder.entry(name).numel();
  } catch (const fsdp::Error&) {
  }
  return 0;
}
