// A training checkpoint out as a Hugging Face folder (`fsdp_train export`): gathered from
// its shards one unit at a time, whatever the checkpoint's world size, into config.json,
// sharded safetensors with their index, and the tokenizer when the run's data says which one
// it was; transformers and vLLM load it unchanged, and `model.init_from` reads it back. A
// LoRA checkpoint (adapters only, on a recorded base) goes out as a PEFT adapter folder, or
// merged into its base as a full model.
#pragma once

#include <string>

#include "fsdp/ckpt/hf_export.h"

namespace fsdp::train {

enum class ExportAs {
  Model,        // a full checkpoint as it is
  PeftAdapter,  // a LoRA checkpoint's adapters as PEFT writes them
  Merged,       // a LoRA checkpoint's adapters merged into its base
};

struct ExportRequest {
  std::string checkpoint;  // step_<N>/, or a checkpoint.dir: its newest complete, verified one
  std::string output;
  ExportAs as = ExportAs::Model;
  std::string base;  // Merged: the base folder, when not the one the checkpoint records
  ckpt::HfExportOptions options;
  bool dtype_given = false;      // options.dtype was asked for (adapters default to float32)
  bool tokenizer_given = false;  // options.tokenizer_model was asked for (else the run's own)
};

// Throws fsdp::Error naming the checkpoint or the flag at fault (not a checkpoint, a LoRA
// checkpoint exported as a model or the reverse, the output folder not empty, ...).
void export_checkpoint(const ExportRequest& request);

// The tokenizer file a model was trained with, as export and generate find it when no
// --tokenizer is given: for an fsdp_train checkpoint (or a checkpoint.dir, its newest), the
// one `fsdp_train prepare` recorded beside the run's data.path, else its model.init_from
// folder's; for a Hugging Face folder, its tokenizer.json, else its tokenizer.model. "" when
// there is none that still exists.
std::string run_tokenizer(const std::string& checkpoint);

}  // namespace fsdp::train
