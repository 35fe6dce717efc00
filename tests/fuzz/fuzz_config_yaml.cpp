// Fuzz target: the YAML config loader (config::load_config_string: yaml-cpp, the field
// table, --set overrides, validation), then the model shape the trainer resolves from it.
// Lines "#set section.key=value" (YAML comments, invisible to the parse) are also passed
// as --set overrides, so the override path is fuzzed with the file.
// Properties of an accepted config: its dump_yaml loads back to an equal config (what
// checkpoints store and ranks compare), and its model shape validates or is refused.
#include <string>
#include <vector>

#include "fsdp/config/config.h"
#include "fsdp/config/model_options.h"
#include "fuzz_util.h"

namespace {

std::vector<std::string> set_lines(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    if (line.rfind("#set ", 0) == 0) out.push_back(line.substr(5));
    pos = end + 1;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  fsdp::config::Config cfg;
  try {
    cfg = fsdp::config::load_config_string(text, "fuzz.yaml", set_lines(text));
  } catch (const fsdp::Error&) {
    return 0;
  }
  const std::string dumped = fsdp::config::dump_yaml(cfg);
  fsdp::config::Config again;
  try {
    again = fsdp::config::load_config_string(dumped, "dumped.yaml");
  } catch (const fsdp::Error&) {
    FUZZ_EXPECT(!"an accepted config's dump_yaml loads back");
  }
  FUZZ_EXPECT(again == cfg);
  if (cfg.model.init_from.empty()) {  // a Hugging Face folder is the config.json target's
    try {
      const fsdp::model::LlamaConfig m = fsdp::config::resolve_model_config(cfg.model);
      FUZZ_EXPECT(m.num_parameters() > 0);
    } catch (const fsdp::Error&) {
    }
  }
  return 0;
}
