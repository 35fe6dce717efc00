// Fuzz target: config.json of a Hugging Face model folder (ckpt::read_hf_llama_config),
// the file model.init_from, generate and export read first. Property of an accepted
// config: it validates, and its parameter count is a positive number that does not
// overflow (what sizes every allocation after it).
#include "fsdp/ckpt/hf_import.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& dir = fsdp::fuzz::scratch_dir();
  fsdp::fuzz::write_file(dir / "config.json", data, size);
  fsdp::model::LlamaConfig cfg;
  try {
    cfg = fsdp::ckpt::read_hf_llama_config(dir.string());
  } catch (const fsdp::Error&) {
    return 0;
  }
  cfg.validate();  // an accepted config is a valid one: a throw here escapes as a finding
  FUZZ_EXPECT(cfg.num_parameters() > 0);
  FUZZ_EXPECT(cfg.train_flops_per_token(cfg.max_seq_len) > 0);
  return 0;
}
