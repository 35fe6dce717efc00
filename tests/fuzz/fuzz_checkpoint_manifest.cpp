// Fuzz target: a checkpoint's manifest.json as resume and export read it
// (ckpt::CheckpointReader: parse_manifest, the pieces tiling every unit, the files and
// their sizes and CRCs), then the model check and a read of every unit's state, against
// one real rank file of a tiny model written at start-up. The committed seed is the
// manifest that matches that file (FSDP_FUZZ_PRINT_SEED=1 prints it).
// A piece whose tensor in the file has another size is refused only when read (by name):
// that is an error like the others, not a finding.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fsdp/ckpt/checkpoint_reader.h"
#include "fsdp/ckpt/manifest.h"
#include "fsdp/ckpt/safetensors.h"
#include "fsdp/model/param_units.h"
#include "fuzz_util.h"

namespace {

fsdp::model::LlamaConfig tiny() {
  fsdp::model::LlamaConfig c;
  c.vocab_size = 8, c.hidden_size = 4, c.intermediate_size = 6, c.num_layers = 1;
  c.num_heads = 2, c.num_kv_heads = 1, c.max_seq_len = 8;
  return c;
}

const std::filesystem::path& checkpoint_dir() {
  static const std::filesystem::path dir = fsdp::fuzz::scratch_dir() / "step_1";
  return dir;
}

// The rank file of a one-rank checkpoint of tiny(): every unit's state, values 0, 1, 2, ...
fsdp::ckpt::Manifest write_rank_file() {
  using namespace fsdp::ckpt;
  const auto units = fsdp::model::llama_units(tiny());
  std::vector<std::vector<float>> values;
  std::vector<WriteEntry> entries;
  Manifest m;
  m.model = tiny();
  m.strategy = "FULL_SHARD";
  m.world_size = 1, m.shard_group_size = 1;
  for (const auto& u : units) {
    m.units.push_back(ManifestUnit{u.name, u.numel, {ManifestPiece{0, 0, u.numel}}});
    for (std::string_view kind : kStateKinds) {
      values.emplace_back(size_t(u.numel));
      for (size_t i = 0; i < values.back().size(); ++i) values.back()[i] = float(i);
      entries.push_back(WriteEntry{state_tensor_name(u.name, kind), "F32", {u.numel}, values.back().data(),
                                   size_t(u.numel) * 4});
    }
  }
  std::filesystem::create_directories(checkpoint_dir());
  const WrittenFile f = write_safetensors((checkpoint_dir() / "rank_00000.safetensors").string(), entries);
  m.files.push_back(ManifestFile{"rank_00000.safetensors", f.bytes, f.crc32});
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const fsdp::ckpt::Manifest seed = write_rank_file();
  if (std::getenv("FSDP_FUZZ_PRINT_SEED") != nullptr) {
    std::fputs(fsdp::ckpt::manifest_json(seed).c_str(), stdout);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fsdp::fuzz::write_file(checkpoint_dir() / fsdp::ckpt::kManifestFile, data, size);
  const auto units = fsdp::model::llama_units(tiny());
  try {
    const fsdp::ckpt::CheckpointReader reader(checkpoint_dir().string());
    reader.verify();
    reader.check_model(tiny(), units);
    for (int u = 0; u < int(units.size()); ++u) {
      for (std::string_view kind : fsdp::ckpt::kStateKinds) {
        const fsdp::Tensor out = fsdp::Tensor::empty({units[size_t(u)].numel}, fsdp::DType::F32);
        reader.read(u, kind, 0, out);
      }
    }
  } catch (const fsdp::Error&) {
  }
  return 0;
}
