// What a model folder or an adapter holds, checked in full on import, in process (the fixtures
// are the golden folders, altered by the test and written back with write_safetensors):
//   - every tensor of transformers 5's fused Mixtral layout has the config's whole shape:
//     gate_up_proj as [E, C, 2F], a router stored [C, E], 2E experts where config.json says E,
//     or a 1-D gate_up_proj are refused naming the tensor, its shape and the expected one
//     (element counts alone let some of them load and train wrong weights);
//   - a tensor in two files of a folder without an index is refused naming both files;
//   - weights of a layer (or expert) that config.json does not have are refused by name, and
//     other tensors no model slot reads are a warning;
//   - a NaN or an infinity in a base weight or an adapter names the file, the tensor and the
//     element (it once surfaced only as a NaN loss or non-finite logits).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include <nlohmann/json.hpp>

#include "fsdp/ckpt/hf_import.h"
#include "fsdp/ckpt/safetensors.h"
#include "fsdp/model/param_units.h"
#include "fsdp/train/inference_model.h"
#include "test_util.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;

// A copy of a golden folder in a fresh directory.
std::string copy_folder(const std::string& golden, const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("fsdp_import_checks_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(test::source_path(golden))) {
    if (e.is_regular_file()) fs::copy_file(e.path(), dir / e.path().filename());
  }
  return dir.string();
}

// One tensor as it will be written: a name, a dtype, a shape and its bytes.
struct Stored {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

std::vector<Stored> read_all(const std::string& file) {
  const ckpt::SafetensorsFile f(file);
  std::vector<Stored> out;
  for (const std::string& n : f.names()) {
    const ckpt::TensorEntry& e = f.entry(n);
    out.push_back({n, e.dtype, e.shape, std::string(reinterpret_cast<const char*>(e.data), e.nbytes)});
  }
  return out;
}

void write_all(const std::string& file, const std::vector<Stored>& tensors) {
  std::vector<ckpt::WriteEntry> entries;
  for (const Stored& t : tensors) entries.push_back({t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size()});
  ckpt::write_safetensors(file, entries);
}

// Rewrites `file` with `change` applied to every tensor.
void rewrite(const std::string& file, const std::function<void(std::vector<Stored>&)>& change) {
  std::vector<Stored> t = read_all(file);
  change(t);
  write_all(file, t);
}

Stored& named(std::vector<Stored>& t, const std::string& name) {
  for (Stored& s : t)
    if (s.name == name) return s;
  ADD_FAILURE() << "no tensor " << name;
  return t.front();
}

// Imports every unit of the folder's model, as model.init_from does.
void import_folder(const std::string& dir) {
  const model::LlamaConfig cfg = ckpt::read_hf_llama_config(dir);
  const ckpt::SafetensorsFolder folder(dir);
  ckpt::check_unused_tensors(folder, cfg);
  for (const model::UnitLayout& u : model::llama_units(cfg)) {
    Tensor flat = Tensor::empty({u.numel}, DType::F32);
    ckpt::load_hf_unit(folder, u, flat);
  }
}

TEST(ImportChecks, MixtralFusedTensorsAreCheckedInTheirWholeShape) {
  import_folder(test::source_path("tests/golden/mixtral_tiny_fused"));  // the fixture itself loads
  const std::string gate_up = "model.layers.0.mlp.experts.gate_up_proj";
  const std::string router = "model.layers.0.mlp.gate.weight";
  struct Case {
    const char* what;
    std::function<void(std::vector<Stored>&)> change;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {"gate_up_proj as [E, C, 2F]", [&](auto& t) { named(t, gate_up).shape = {4, 48, 80}; },
       {"tensor '" + gate_up + "' has shape [4, 48, 80] but the model expects [4, 80, 48]",
        "[num_local_experts, 2 x intermediate_size, hidden_size]"}},
      {"the router as [C, E]", [&](auto& t) { named(t, router).shape = {48, 4}; },
       {"tensor '" + router + "' has shape [48, 4] but the model expects [4, 48]"}},
      {"2E experts where config.json says E",
       [&](auto& t) {
         Stored& s = named(t, gate_up);
         s.shape = {8, 80, 48};
         s.bytes += s.bytes;
       },
       {"tensor '" + gate_up + "' has shape [8, 80, 48] but the model expects [4, 80, 48]"}},
      {"a 1-D gate_up_proj", [&](auto& t) { named(t, gate_up).shape = {4 * 80 * 48}; },
       {"tensor '" + gate_up + "' has shape [15360] but the model expects [4, 80, 48]"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string dir = copy_folder("tests/golden/mixtral_tiny_fused", "fused");
    rewrite(dir + "/model.safetensors", c.change);
    const std::string what = test::error_message([&] { import_folder(dir); });
    for (const std::string& part : c.message) EXPECT_NE(what.find(part), std::string::npos) << part << "\nin: " << what;
  }
}

TEST(ImportChecks, ATensorInTwoFilesWithoutAnIndexIsRefusedByName) {
  const std::string dir = copy_folder("tests/golden/llama3_tied_tiny", "duplicate");
  std::vector<Stored> all = read_all(dir + "/model.safetensors");
  Stored copy = named(all, "model.embed_tokens.weight");
  write_all(dir + "/extra.safetensors", {copy});
  test::expect_error([&] { ckpt::SafetensorsFolder folder(dir); },
                     {"tensor model.embed_tokens.weight is in both", "extra.safetensors", "model.safetensors",
                      "no model.safetensors.index.json says which to use"});
}

TEST(ImportChecks, LayersBeyondConfigJsonAreRefusedAndStrayTensorsWarned) {
  const std::string dir = copy_folder("tests/golden/llama3_tied_tiny", "extra_layer");
  nlohmann::json j = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  ASSERT_EQ(j["num_hidden_layers"], 2);
  j["num_hidden_layers"] = 1;
  std::ofstream(dir + "/config.json") << j.dump();
  test::expect_error([&] { import_folder(dir); },
                     {"tensor 'model.layers.1.", "is of layer 1, but config.json says num_hidden_layers 1"});
  // A tensor no slot reads, of no layer: a warning, and the import goes on.
  const std::string stray = copy_folder("tests/golden/llama3_tied_tiny", "stray");
  rewrite(stray + "/model.safetensors", [](std::vector<Stored>& t) {
    Stored s = t.front();
    s.name = "model.vision_tower.weight";
    t.push_back(s);
  });
  import_folder(stray);
}

TEST(ImportChecks, ANonFiniteWeightIsNamedByFileTensorAndElement) {
  const std::string dir = copy_folder("tests/golden/llama3_tied_tiny", "nan");
  const std::string name = "model.layers.1.self_attn.k_proj.weight";
  rewrite(dir + "/model.safetensors", [&](std::vector<Stored>& t) {
    Stored& s = named(t, name);
    ASSERT_EQ(s.dtype, "F32");
    reinterpret_cast<float*>(s.bytes.data())[5] = std::numeric_limits<float>::quiet_NaN();
  });
  test::expect_error([&] { import_folder(dir); },
                     {dir + "/model.safetensors: tensor '" + name + "' holds 1 non-finite value(s)",
                      "the first at element 5"});
}

TEST(ImportChecks, ANonFiniteAdapterTensorIsNamedWhereItIsLoaded) {
  const std::string adapter = copy_folder("tests/golden/lora_tiny/r4_alpha8", "nan_adapter");
  std::string name;
  rewrite(adapter + "/adapter_model.safetensors", [&](std::vector<Stored>& t) {
    Stored& s = t.back();
    name = s.name;
    ASSERT_EQ(s.dtype, "F32");
    reinterpret_cast<float*>(s.bytes.data())[0] = std::numeric_limits<float>::infinity();
  });
  // generate --adapter: the merged model is built unit by unit from the adapter's tensors.
  test::expect_error([&] { train::load_inference_model(test::source_path("tests/golden/llama_gqa_tiny"), adapter); },
                     {adapter + "/adapter_model.safetensors: tensor '" + name + "' holds 1 non-finite value(s)"});
}

}  // namespace
}  // namespace fsdp
