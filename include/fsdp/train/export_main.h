// `fsdp_train export --checkpoint DIR --output HF_DIR`: gathers a sharded training
// checkpoint into one Hugging Face Llama folder (config.json, sharded safetensors with
// their index, and the tokenizer when the run's data says which one it was), which
// transformers and vLLM load unchanged, and which `model.init_from` reads back. One unit
// at a time is assembled in memory, whatever the checkpoint's world size.
#pragma once

namespace fsdp::train {

// argv[0] is "export", flags follow. Returns 0 on success, 2 for a usage error, 1 when the
// export failed (bad checkpoint, output folder not empty, write error).
int export_main(int argc, char** argv);

const char* export_help();

}  // namespace fsdp::train
