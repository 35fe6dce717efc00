// Llama 3 against Hugging Face transformers: tied embeddings and RoPE scaling.
//
// tests/golden/llama3_tied_tiny (generate_llama3.py) is a tiny random Llama in Llama 3.2's
// form: tie_word_embeddings (no lm_head.weight in the file: the head reads the embedding
// table) and rope_scaling llama3 over rope_theta 500000, every branch of the scaling taken.
// Our logits, loss and every gradient (the embedding's is both uses summed) are held to the
// float64 reference, as the Llama 2 golden test is, at 1e-5 norm-wise; the same weights with
// rope_scaling linear to transformers' logits for them. rope_scaling/inv_freq.json holds
// transformers' own frequencies for the published Llama 3.1 and 3.2 configs.
// The export of the tied folder is the folder transformers wrote, byte for byte.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "fsdp/ckpt/checkpoint_reader.h"
#include "fsdp/ckpt/hf_export.h"
#include "fsdp/ckpt/hf_import.h"
#include "fsdp/config/config.h"
#include "fsdp/config/model_options.h"
#include "fsdp/model/decoder.h"
#include "fsdp/model/local_params.h"
#include "fsdp/model/rope_scaling.h"
#include "fsdp/train/setup.h"
#include "../common/golden_fixture.h"
#include "test_util.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr double kGoldenTolerance = 1e-5;  // as tests/cpu/test_llama_golden.cpp, for the same reasons

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

class Llama3Golden : public test::GoldenModelTest {
 protected:
  void SetUp() override { open(test::source_path("tests/golden/llama3_tied_tiny")); }

  // Forward (and backward) of the fixture's batch; the logits' error against `logits_name`.
  double logits_error(const model::LlamaConfig& cfg, const std::string& logits_name) const {
    model::Llama llama(cfg);
    model::LocalParams params(llama.units());
    const ckpt::SafetensorsFolder folder(dir_);
    for (int u = 0; u < int(llama.units().size()); ++u) ckpt::load_hf_unit(folder, llama.units()[u], params.params(u));
    model::LlamaActivations act(cfg, 2, 13, DType::F32, Device::cpu());
    load_batch(act);
    llama.forward(act, params);
    return test::rel_error(act.logits, expected(logits_name));
  }
};

TEST_F(Llama3Golden, ConfigReadsTiedEmbeddingsAndLlama3Scaling) {
  EXPECT_TRUE(cfg_.tie_word_embeddings);
  EXPECT_EQ(cfg_.rope_theta, 500000.0);
  const model::RopeScaling want{model::RopeScaling::Type::Llama3, 8.0, 1.0, 4.0, 64};
  EXPECT_EQ(cfg_.rope_scaling, want);
  // transformers' model.num_parameters() for this config: the table counted once.
  EXPECT_EQ(cfg_.num_parameters(), 16032);
  const auto units = model::llama_units(cfg_);
  ASSERT_EQ(units.back().params.size(), 1u);  // the head holds only the final norm...
  EXPECT_EQ(units.back().params[0].hf_name, "model.norm.weight");
  EXPECT_EQ(units.back().reads_unit, model::embedding_unit());  // ...and reads the table
}

TEST_F(Llama3Golden, LogitsLossAndEveryGradientMatchTransformers) {
  model::Llama llama(cfg_);
  model::LocalParams params(llama.units());
  const ckpt::SafetensorsFolder folder(dir_);
  EXPECT_FALSE(folder.contains("lm_head.weight"));
  for (int u = 0; u < int(llama.units().size()); ++u) ckpt::load_hf_unit(folder, llama.units()[u], params.params(u));
  model::LlamaActivations act(cfg_, 2, 13, DType::F32, Device::cpu());
  load_batch(act);

  const model::LossSum fwd = llama.forward(act, params);
  const double logits_err = test::rel_error(act.logits, expected("logits"));
  EXPECT_LT(logits_err, kGoldenTolerance);
  const double ref_loss = expected("loss").get_flat(0);
  EXPECT_EQ(fwd.tokens, 21);
  EXPECT_LT(std::abs(fwd.sum / double(fwd.tokens) - ref_loss) / std::abs(ref_loss), kGoldenTolerance);

  llama.forward_backward(act, params, 1.0 / double(fwd.tokens));
  const GradientCheck grads = expect_every_gradient(llama, params, kGoldenTolerance);
  EXPECT_EQ(grads.checked, 1 + 2 * 9 + 1);  // the table, 9 per block, the final norm: no lm_head
  RecordProperty("logits_rel_error", fmt::format("{:.2e}", logits_err));
  RecordProperty("worst_grad_rel_error", fmt::format("{:.2e}", grads.worst));
  std::printf("Llama 3 golden: logits %.1e, worst gradient %.1e (tolerance %.0e)\n", logits_err, grads.worst,
              kGoldenTolerance);
}

// The table's gradient is the sum of its two uses, as autograd gives a shared weight: the
// same model untied, its lm_head a copy of the table, computes the same logits, and its
// embedding's and lm_head's gradients add up to the tied one; each part is a good share of
// it, so a head that forgot either would miss.
TEST_F(Llama3Golden, TheTableGradientSumsBothUses) {
  const auto load = [&](const model::Llama& llama, model::LocalParams& params) {
    const ckpt::SafetensorsFolder folder(dir_);
    for (int u = 0; u + 1 < int(llama.units().size()); ++u)
      ckpt::load_hf_unit(folder, llama.units()[u], params.params(u));
    const Tensor table = params.params(model::embedding_unit()).narrow(0, 0, cfg_.vocab_size * cfg_.hidden_size);
    const model::UnitLayout& head = llama.units().back();
    std::vector<float> norm = ckpt::read_as_f32(folder.entry("model.norm.weight"));
    head.view(params.params(int(llama.units().size()) - 1), "norm")
        .copy_(Tensor::from_blob(norm.data(), {cfg_.hidden_size}, DType::F32));
    if (!llama.config().tie_word_embeddings)
      head.view(params.params(int(llama.units().size()) - 1), "lm_head").copy_(table.reshape(
          {cfg_.vocab_size, cfg_.hidden_size}));
  };
  const auto run = [&](const model::LlamaConfig& cfg, std::vector<Tensor>& grads) {
    model::Llama llama(cfg);
    model::LocalParams params(llama.units());
    load(llama, params);
    model::LlamaActivations act(cfg, 2, 13, DType::F32, Device::cpu());
    load_batch(act);
    llama.forward_backward(act, params, 1.0 / 21);
    for (int u = 0; u < params.num_units(); ++u) grads.push_back(params.grads(u).clone());
    return act.logits.clone();
  };
  model::LlamaConfig untied = cfg_;
  untied.tie_word_embeddings = false;
  std::vector<Tensor> tied_grads, untied_grads;
  const Tensor tied_logits = run(cfg_, tied_grads), untied_logits = run(untied, untied_grads);
  EXPECT_LT(test::rel_error(untied_logits, tied_logits), 1e-6);
  const int64_t VC = cfg_.vocab_size * cfg_.hidden_size;
  const Tensor embedding_part = untied_grads.front().narrow(0, 0, VC);
  const Tensor head_part = untied_grads.back().narrow(0, 0, VC);  // lm_head leads the untied head unit
  Tensor sum = Tensor::empty({VC}, DType::F64);
  for (int64_t i = 0; i < VC; ++i) sum.set_flat(i, embedding_part.get_flat(i) + head_part.get_flat(i));
  const Tensor tied = tied_grads.front().narrow(0, 0, VC);
  EXPECT_LT(test::rel_error(tied, sum), 1e-6);
  EXPECT_LT(test::rel_error(tied, expected("grad.model.embed_tokens.weight")), kGoldenTolerance);
  EXPECT_GT(test::rel_error(tied, head_part), 0.1);       // the embedding's use matters...
  EXPECT_GT(test::rel_error(tied, embedding_part), 0.1);  // ...and so does the head's
}

TEST_F(Llama3Golden, LinearScalingMatchesTransformers) {
  model::LlamaConfig linear = cfg_;
  linear.rope_scaling = model::RopeScaling{model::RopeScaling::Type::Linear, 4.0};
  const double err = logits_error(linear, "linear.logits");
  EXPECT_LT(err, kGoldenTolerance);
  RecordProperty("linear_logits_rel_error", fmt::format("{:.2e}", err));
}

// The fixture tells the scalings apart: without scaling, or with the other type, or with a
// wrong blend (low and high swapped round the band), the logits miss by far more than 1e-2.
TEST_F(Llama3Golden, TheScalingMovesTheLogits) {
  model::LlamaConfig none = cfg_;
  none.rope_scaling = model::RopeScaling{};
  EXPECT_GT(logits_error(none, "logits"), 1e-2);
  EXPECT_GT(logits_error(cfg_, "linear.logits"), 1e-2);
  model::LlamaConfig other_band = cfg_;
  other_band.rope_scaling.high_freq_factor = 2.0;  // moves the blended frequency's weights
  EXPECT_GT(logits_error(other_band, "logits"), 1e-3);
}

// transformers' own LlamaRotaryEmbedding.inv_freq (float32) for Llama 3.1 8B, Llama 3.2 1B,
// a linear and an unscaled config: ours, computed in double, equal its float64 run of the
// same code to 1e-12 and its float32 values to 1e-6 (float32 rounding through the blend).
TEST(RopeScaling, FrequenciesMatchTransformers) {
  const json cases = read_json(test::source_path("tests/golden/rope_scaling/inv_freq.json"))["cases"];
  ASSERT_EQ(cases.size(), 5u);
  for (const json& c : cases) {
    model::LlamaConfig cfg = model::llama_preset("tiny");
    cfg.hidden_size = c["head_dim"].get<int64_t>() * 4;
    cfg.num_heads = 4;
    cfg.num_kv_heads = 4;
    cfg.rope_theta = c["rope_theta"].get<double>();
    if (!c["rope_scaling"].is_null()) {
      const json& s = c["rope_scaling"];
      cfg.rope_scaling.type = model::rope_scaling_type(s.value("rope_type", s.value("type", "")));
      cfg.rope_scaling.factor = s["factor"].get<double>();
      cfg.rope_scaling.low_freq_factor = s.value("low_freq_factor", 1.0);
      cfg.rope_scaling.high_freq_factor = s.value("high_freq_factor", 4.0);
      cfg.rope_scaling.original_max_position = s.value("original_max_position_embeddings", int64_t{8192});
    }
    const std::vector<double> ours = model::rope_inv_freq(cfg);
    const auto exact = c["inv_freq_float64"].get<std::vector<double>>();
    const auto hf32 = c["inv_freq_float32"].get<std::vector<double>>();
    ASSERT_EQ(ours.size(), exact.size()) << c["name"];
    for (size_t i = 0; i < ours.size(); ++i) {
      EXPECT_NEAR(ours[i], exact[i], 1e-12 * exact[i]) << c["name"] << " frequency " << i;
      // float32's rounding, compounded by the blend's few float32 operations (3.2e-7 measured)
      EXPECT_NEAR(ours[i], hf32[i], 1e-6 * hf32[i]) << c["name"] << " frequency " << i;
    }
  }
}

TEST(RopeScaling, OtherTypesAndBadFactorsAreRefusedByName) {
  EXPECT_ERROR_MENTIONS(model::rope_scaling_type("yarn"), "'yarn' is not supported");
  EXPECT_ERROR_MENTIONS(model::rope_scaling_type("dynamic"), "linear or llama3");
  model::LlamaConfig c = model::llama_preset("tiny");
  c.rope_scaling = model::RopeScaling{model::RopeScaling::Type::Linear, 0.5};
  EXPECT_ERROR_MENTIONS(c.validate(), "model.rope_scaling_factor must be >= 1");
  c.rope_scaling = model::RopeScaling{model::RopeScaling::Type::Llama3, 8.0, 4.0, 1.0, 8192};
  EXPECT_ERROR_MENTIONS(c.validate(), "model.rope_high_freq_factor must be > model.rope_low_freq_factor");
  c.rope_scaling = model::RopeScaling{model::RopeScaling::Type::Llama3, 8.0, 1.0, 4.0, 0};
  EXPECT_ERROR_MENTIONS(c.validate(), "model.rope_original_max_position_embeddings must be > 0");
}

// config.json's rope_scaling and tie_word_embeddings as transformers 4.x writes them
// (rope_type, or the older "type"; "default" is unscaled), and each refusal by name.
TEST(Llama3Config, RopeScalingAndTyingReadFromConfigJson) {
  const fs::path dir = fs::temp_directory_path() / ("fsdp_llama3_config_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  json base = read_json(test::source_path("tests/golden/llama3_tied_tiny/config.json"));
  const auto read_with = [&](const char* key, const json& value) {
    json j = base;
    j[key] = value;
    std::ofstream(dir / "config.json") << j.dump();
    return ckpt::read_hf_llama_config(dir.string());
  };
  EXPECT_EQ(read_with("rope_scaling", {{"type", "linear"}, {"factor", 2.0}}).rope_scaling,
            (model::RopeScaling{model::RopeScaling::Type::Linear, 2.0}));
  EXPECT_EQ(read_with("rope_scaling", {{"rope_type", "default"}}).rope_scaling, model::RopeScaling{});
  EXPECT_EQ(read_with("rope_scaling", nullptr).rope_scaling, model::RopeScaling{});
  EXPECT_FALSE(read_with("tie_word_embeddings", false).tie_word_embeddings);
  const auto refused = [&](const char* key, const json& value, std::initializer_list<std::string> parts) {
    test::expect_error([&] { read_with(key, value); }, parts, key);
  };
  refused("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}, {"config.json", "'yarn' is not supported"});
  refused("rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}}, {"config.json", "'dynamic'"});
  refused("rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}, {"config.json", "rope_scaling.low_freq_factor"});
  refused("rope_scaling", {{"rope_type", "linear"}, {"factor", "2"}}, {"rope_scaling.factor must be a number"});
  refused("rope_scaling", {{"rope_type", "linear"}, {"factor", 0.5}}, {"config.json", "rope_scaling_factor must be >= 1"});
  refused("rope_scaling", json::array({1, 2}), {"rope_scaling must be an object or null"});
  refused("tie_word_embeddings", "yes", {"config.json", "tie_word_embeddings must be true or false"});
  base["model_type"] = "mixtral";
  base["num_local_experts"] = 4;
  base["num_experts_per_tok"] = 2;
  refused("rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}, {"config.json", "Mixtral", "ignores it"});
  fs::remove_all(dir);
}

// model.rope_* over a preset or a folder: a fine-tune may change the scaling (that is what
// a longer-context fine-tune does), never the tying (the folder's parameters are its shape).
TEST(Llama3Config, RopeKeysOverridePresetsAndFoldersTyingMustAgree) {
  const std::string folder = test::source_path("tests/golden/llama3_tied_tiny");
  const auto resolve = [](std::vector<std::string> sets) {
    return config::resolve_model_config(config::load_config_string("", "test", sets).model);
  };
  const model::LlamaConfig l31 = resolve({"model.preset=llama3.1_8b", "model.rope_scaling_factor=16"});
  EXPECT_EQ(l31.rope_scaling, (model::RopeScaling{model::RopeScaling::Type::Llama3, 16.0, 1.0, 4.0, 8192}));
  const model::LlamaConfig lin = resolve({"model.init_from=" + folder, "model.rope_scaling=linear",
                                          "model.rope_scaling_factor=4"});
  EXPECT_EQ(lin.rope_scaling.type, model::RopeScaling::Type::Linear);
  EXPECT_EQ(lin.rope_scaling.factor, 4.0);
  EXPECT_EQ(resolve({"model.init_from=" + folder, "model.rope_scaling=none"}).rope_scaling, model::RopeScaling{});
  EXPECT_TRUE(resolve({"model.init_from=" + folder, "model.tie_word_embeddings=true"}).tie_word_embeddings);
  test::expect_error([&] { resolve({"model.init_from=" + folder, "model.tie_word_embeddings=false"}); },
                     {"model.tie_word_embeddings = false contradicts", "config.json, which has true"});
  test::expect_error([&] { resolve({"model.preset=tiny", "model.rope_scaling_factor=4"}); },
                     {"model.rope_scaling_factor", "need model.rope_scaling: linear or llama3"});
  EXPECT_TRUE(resolve({"model.preset=tiny", "model.tie_word_embeddings=true"}).tie_word_embeddings);
}

// The tied folder we export is the one transformers wrote: the same tensors, byte for
// byte (no lm_head.weight), and a config.json with the same tying and rope_scaling, which
// reads back as the same LlamaConfig. (generate_llama3.py --check-export also loads our
// export in transformers and compares the logits.)
// Our float32 export of the fixture's model (imported through our reader) into `out`.
void export_fixture(const std::string& dir, const fs::path& out) {
  const model::LlamaConfig cfg = ckpt::read_hf_llama_config(dir);
  const auto units = model::llama_units(cfg);
  const ckpt::SafetensorsFolder folder(dir);
  ckpt::HfExportOptions opt;
  opt.dtype = DType::F32;
  ckpt::write_hf_llama(out.string(), cfg, units, [&](int u) {
    Tensor t = Tensor::empty({units[size_t(u)].numel}, DType::F32);
    ckpt::load_hf_unit(folder, units[size_t(u)], t);
    return t;
  }, opt);
}

TEST_F(Llama3Golden, ExportIsTheFolderTransformersWrote) {
  const fs::path out = fs::temp_directory_path() / ("fsdp_llama3_export_" + std::to_string(::getpid()));
  fs::remove_all(out);
  export_fixture(dir_, out);
  const ckpt::SafetensorsFolder folder(dir_), ours(out.string());
  EXPECT_EQ(ours.names(), folder.names());
  for (const std::string& name : folder.names()) {
    const ckpt::TensorEntry &a = ours.entry(name), &b = folder.entry(name);
    ASSERT_EQ(a.nbytes, b.nbytes) << name;
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes), 0) << name;
  }
  const json got = read_json(out / "config.json"), want = read_json(fs::path(dir_) / "config.json");
  EXPECT_EQ(got["tie_word_embeddings"], true);
  EXPECT_EQ(got["rope_scaling"], want["rope_scaling"]);
  const model::LlamaConfig back = ckpt::read_hf_llama_config(out.string());
  EXPECT_TRUE(back.tie_word_embeddings);
  EXPECT_EQ(back.rope_scaling, cfg_.rope_scaling);
  fs::remove_all(out);
}

// Not a check: generate_llama3.py --check-export runs this with FSDP_LLAMA3_EXPORT_OUT=DIR
// and loads DIR in transformers.
TEST(Llama3ExportScript, WriteExport) {
  const char* out = std::getenv("FSDP_LLAMA3_EXPORT_OUT");
  if (out == nullptr) GTEST_SKIP() << "set FSDP_LLAMA3_EXPORT_OUT=DIR to write the export generate_llama3.py loads";
  export_fixture(test::source_path("tests/golden/llama3_tied_tiny"), out);
}

}  // namespace
}  // namespace fsdp
