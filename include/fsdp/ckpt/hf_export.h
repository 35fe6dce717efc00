// Writing a Hugging Face Llama folder from the model's flat parameter units: the inverse of
// hf_import.h, so `LlamaForCausalLM.from_pretrained(dir)` (and vLLM) load what we trained.
//
//   out_dir/config.json                     LlamaForCausalLM, model_type llama, our shapes
//   out_dir/model.safetensors               when everything fits in one shard, else
//   out_dir/model-0000i-of-0000n.safetensors + model.safetensors.index.json
//   out_dir/tokenizer.model + tokenizer_config.json   when a sentencepiece model is given
//   out_dir/tokenizer.json (+ the files beside it)    when a Hugging Face tokenizer is given
//
// Tensors carry Hugging Face's names and shapes (ParamSlot::hf_name) and are copied as they
// lie in the unit: our q/k rows are already in HF's rotate-half (head-major, half-split)
// order, which is why the importer permutes nothing and the export does not either.
//
// Memory: one unit (the callback's tensor) plus one output shard at a time, so a caller can
// gather a unit from its shards, hand it over, and free it before the next.
//
// Crash safety: everything is written into `<out_dir>.tmp-<pid>`, fsynced, and renamed to
// out_dir only when complete; any failure removes the temporary folder, so out_dir is either
// absent (or the empty folder it was) or a complete export. An out_dir that exists and is
// not empty is refused before anything is written.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fsdp/core/tensor.h"
#include "fsdp/model/llama_config.h"
#include "fsdp/model/param_units.h"

namespace fsdp::ckpt {

struct HfExportOptions {
  // Element type of the weights: BF16 (what published Llama checkpoints ship; rounded to
  // nearest even, as torch's .to(torch.bfloat16)) or F32 (bit-exact).
  DType dtype = DType::BF16;
  // Replace an out_dir that exists and is not empty (export --overwrite): the new folder is
  // written beside it and takes its place only once complete. false = refuse it.
  bool overwrite = false;
  // Largest shard file, counting tensor bytes as transformers' save_pretrained does
  // (max_shard_size="5GB", 1 GB = 10^9 bytes). A tensor larger than this gets a shard alone.
  uint64_t max_shard_bytes = 5'000'000'000ULL;
  // The run's tokenizer (empty: no tokenizer files). A Hugging Face tokenizer.json is copied
  // verbatim with the files beside it that transformers reads (tokenizer_config.json,
  // special_tokens_map.json, a chat template). A sentencepiece model is copied in as
  // tokenizer.model, its BOS/EOS/UNK pieces written into tokenizer_config.json so
  // LlamaTokenizer / AutoTokenizer load it.
  // LlamaTokenizer then encodes exactly as sentencepiece does. AutoTokenizer's fast tokenizer
  // is converted by transformers with Llama's own normaliser, so it is exact only for a model
  // trained like Llama's (identity normalisation, --remove_extra_whitespaces=false); with
  // sentencepiece's defaults it keeps runs of spaces that sentencepiece collapses (measured:
  // 3 of 1189 KJV paragraphs differ with the demo tokenizer).
  std::string tokenizer_model;
  // Token ids for config.json (generation reads them there); unset = taken from the
  // tokenizer when one is given, else left out.
  std::optional<int64_t> bos_token_id, eos_token_id;
  // Extra string pairs for every shard's safetensors __metadata__ (beside "format": "pt").
  std::map<std::string, std::string> metadata;
};

// Writes the folder described above. `units` must be model::llama_units(cfg) (checked by
// name and shape). `full_unit(u)` returns unit u's whole flat buffer: float32, CPU,
// contiguous, 1-D, at least units[u].numel elements (FSDP padding past that is ignored);
// it is called once per unit, in order, and its tensor is released before the next call.
// A non-finite weight, or one that overflows the target dtype, is refused by name.
// Errors (fsdp::Error) name the folder, file or tensor at fault.
void write_hf_llama(const std::string& out_dir, const model::LlamaConfig& cfg,
                    const std::vector<model::UnitLayout>& units, const std::function<Tensor(int unit)>& full_unit,
                    const HfExportOptions& opt = {});

// The shard file names write_hf_llama uses for the given tensor byte sizes (in write order)
// and the file each tensor goes to: transformers' greedy rule, a new file when the next
// tensor would push the current one past max_shard_bytes. One file is "model.safetensors".
std::vector<std::string> hf_shard_plan(const std::vector<uint64_t>& tensor_bytes, uint64_t max_shard_bytes,
                                       std::vector<int>* shard_of_tensor);

}  // namespace fsdp::ckpt
