// LoRA through the command line, end to end: `fsdp_train train` continues the PEFT golden
// adapter (lora.init_from) on the golden base (model.init_from) for a few steps; `export
// --adapter` writes a PEFT folder whose tensors are the checkpoint's adapters bit for bit
// and which loads back through lora.init_from; `export --merge` writes a plain Hugging Face
// model whose logits equal the LoRA model's (the merge W + s B A against the unmerged
// adapters, float32: 1e-5 norm-wise, the golden bound); `generate` gives the same greedy text
// from the LoRA checkpoint, from the base with --adapter and from the merged folder. And the
// refusals: a LoRA checkpoint exported without --adapter/--merge, --merge on another base,
// an adapter folder using DoRA or one of another base's shape, bad targets and ranks at
// `train` (exit 2, nothing run).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../common/lora_fixture.h"
#include "../common/made_up_tokenizer.h"
#include "fsdp/ckpt/checkpoint_reader.h"
#include "fsdp/ckpt/peft_adapter.h"
#include "test_util.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;

struct LoraCli : ::testing::Test {
  // A directory per process: ctest -j runs this suite's tests side by side, each in its own.
  static void SetUpTestSuite() {
    root = fs::temp_directory_path() / ("fsdp_lora_cli_" + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::create_directories(root);
    base = test::source_path("tests/golden/llama_gqa_tiny");
    std::ofstream(root / "lora.yaml") << "model:\n  init_from: " << base
                                      << "\nlora:\n  enabled: true\n  rank: 4\n  alpha: 8\n  targets: all-linear\n"
                                         "  init_from: "
                                      << test::source_path("tests/golden/lora_tiny/r4_alpha8")
                                      << "\ndata:\n  source: synthetic\ntrain:\n  seq_len: 32\n  micro_batch_size: 2\n"
                                         "  max_steps: 3\n  log_every: 1\noptim:\n  lr: 1e-3\n  warmup_steps: 0\n";
    trained = run("train --config " + (root / "lora.yaml").string() + " --set run.dir=" + (root / "run").string(),
                  "train");
  }
  static void TearDownTestSuite() { fs::remove_all(root); }
  static test::CommandResult run(const std::string& args, const std::string& name) {
    return test::run_command(std::string(FSDP_TRAIN_BIN) + " " + args, (root / (name + ".log")).string());
  }
  static std::string checkpoint() { return (root / "run" / "checkpoints").string(); }

  static fs::path root;
  static std::string base;
  static test::CommandResult trained;
};
fs::path LoraCli::root;
std::string LoraCli::base;
test::CommandResult LoraCli::trained;

TEST_F(LoraCli, TrainExportsAdapterThatLoadsBack) {
  ASSERT_EQ(trained.code, 0) << trained.out;
  EXPECT_NE(trained.out.find("lora: r 4 alpha 8"), std::string::npos) << trained.out;
  EXPECT_NE(trained.out.find("lora: adapters from"), std::string::npos) << trained.out;
  const auto r = run("export --checkpoint " + checkpoint() + " --output " + (root / "adapter").string() + " --adapter",
                     "export_adapter");
  ASSERT_EQ(r.code, 0) << r.out;
  const ckpt::PeftAdapterConfig c = ckpt::read_peft_adapter_config((root / "adapter").string());
  EXPECT_EQ(c.r, 4);
  EXPECT_EQ(c.lora_alpha, 8.0);
  EXPECT_EQ(c.base_model_name_or_path, base);
  EXPECT_EQ(c.target_modules.size(), 7u);
  // The exported tensors are the checkpoint's adapters, bit for bit (float32).
  const ckpt::CheckpointReader reader(ckpt::list_checkpoints(checkpoint()).front());
  const ckpt::SafetensorsFolder folder((root / "adapter").string());
  const auto units = model::lora_units(reader.manifest().model, test::fixture_peft(false, false));
  int checked = 0;
  for (int u = 0; u < int(units.size()); ++u) {
    if (units[size_t(u)].numel == 0) continue;
    Tensor saved = Tensor::empty({units[size_t(u)].numel}, DType::F32), exported = saved.clone();
    reader.read(u, "master", 0, saved);
    ckpt::load_hf_unit(folder, units[size_t(u)], exported);
    EXPECT_TRUE(test::same_bits(exported, saved)) << units[size_t(u)].name;
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

// Our logits on the golden batch: the LoRA model on the base with an adapter folder, and
// the plain model on a merged folder.
Tensor lora_logits(const std::string& base, const std::string& adapter) {
  const test::GoldenModel g(base);
  model::Llama lora(g.cfg, DType::F32, Device::cpu(), test::fixture_peft(false, false));
  auto params = test::lora_params(lora, base, adapter);
  model::LlamaActivations a(g.cfg, g.B, g.T, DType::F32, Device::cpu());
  a.ids.copy_(g.ids);
  a.targets.copy_(g.targets);
  lora.forward(a, *params);
  return a.logits.clone();
}

Tensor plain_logits(const std::string& folder, const test::GoldenModel& g) {
  model::Llama plain(ckpt::read_hf_llama_config(folder));
  model::LocalParams params(plain.units());
  const ckpt::SafetensorsFolder f(folder);
  for (int u = 0; u < params.num_units(); ++u) ckpt::load_hf_unit(f, plain.units()[size_t(u)], params.params(u));
  model::LlamaActivations a(g.cfg, g.B, g.T, DType::F32, Device::cpu());
  a.ids.copy_(g.ids);
  a.targets.copy_(g.targets);
  plain.forward(a, params);
  return a.logits.clone();
}

TEST_F(LoraCli, MergedExportComputesTheLoraModel) {
  ASSERT_EQ(trained.code, 0) << trained.out;
  const std::string adapter = (root / "adapter_for_merge").string(), merged = (root / "merged").string();
  ASSERT_EQ(run("export --checkpoint " + checkpoint() + " --output " + adapter + " --adapter", "ea").code, 0);
  const auto r = run("export --checkpoint " + checkpoint() + " --output " + merged + " --merge --dtype float32", "em");
  ASSERT_EQ(r.code, 0) << r.out;
  const double err = test::rel_error(plain_logits(merged, test::GoldenModel(base)), lora_logits(base, adapter));
  EXPECT_LT(err, 1e-5);
  std::printf("merged export vs unmerged adapters: logits %.1e\n", err);

  // PEFT and transformers load these very exports (tests/golden/lora_export, recorded by
  // check_peft.py, which runs this test with FSDP_LORA_EXPORT_OUT set to copy them out):
  // PeftModel.from_pretrained(base, adapter) and from_pretrained(merged) give our logits.
  if (const char* out = std::getenv("FSDP_LORA_EXPORT_OUT")) {
    fs::copy(adapter, fs::path(out) / "adapter", fs::copy_options::recursive);
    fs::copy(merged, fs::path(out) / "merged", fs::copy_options::recursive);
    const Tensor ours = lora_logits(base, adapter), merged_ours = plain_logits(merged, test::GoldenModel(base));
    ckpt::write_safetensors((fs::path(out) / "ours.safetensors").string(),
                            {{"lora_logits", "F32", {ours.numel()}, ours.data_ptr(), ours.nbytes()},
                             {"merged_logits", "F32", {merged_ours.numel()}, merged_ours.data_ptr(), merged_ours.nbytes()}});
    return;
  }
  const ckpt::SafetensorsFile ref(test::source_path("tests/golden/lora_export/expected.safetensors"));
  const double peft_err = test::rel_error(lora_logits(base, adapter), test::expected_tensor(ref, "peft_logits"));
  const double hf_err = test::rel_error(plain_logits(merged, test::GoldenModel(base)),
                                        test::expected_tensor(ref, "merged_logits"));
  EXPECT_LT(peft_err, 1e-5);
  EXPECT_LT(hf_err, 1e-5);
  // The adapter PEFT loaded is the one exported now. The training is deterministic, bit for
  // bit on one machine, but it runs through OpenBLAS, which picks its sgemm kernel by CPU
  // model (AMD Zen and Intel Skylake-X accumulate in other orders), and through our own
  // kernels built with -march=native: on another CPU the adapters after 4 steps differ in
  // their last bits (seen: 1 ulp on an AMD EPYC against the recording machine's). Within
  // 1e-6 relative, a change that trains anything else (a scale, a wrong target) fails.
  const ckpt::SafetensorsFolder exported(adapter);
  for (const std::string& name : exported.names()) {
    const std::vector<float> want = ckpt::read_as_f32(ref.entry("peft." + name));
    const std::vector<float> got = ckpt::read_as_f32(exported.entry(name));
    ASSERT_EQ(got.size(), want.size()) << name;
    double diff = 0, norm = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
      norm += double(want[i]) * want[i];
    }
    EXPECT_LT(std::sqrt(diff / std::max(norm, 1e-30)), 1e-6) << name;
  }
  std::printf("PeftModel.from_pretrained on our adapter vs our LoRA model: logits %.1e; from_pretrained on our merged "
              "export vs our merged model: %.1e\n", peft_err, hf_err);
}

TEST_F(LoraCli, GenerateFromCheckpointAdapterAndMergeAgree) {
  ASSERT_EQ(trained.code, 0) << trained.out;
  const std::string spm = test::made_up_tokenizer(root, 96);
  const std::string adapter = (root / "adapter_gen").string(), merged = (root / "merged_gen").string();
  ASSERT_EQ(run("export --checkpoint " + checkpoint() + " --output " + adapter + " --adapter", "ga").code, 0);
  ASSERT_EQ(run("export --checkpoint " + checkpoint() + " --output " + merged + " --merge --dtype float32", "gm").code, 0);
  const std::string flags = " --tokenizer " + spm + " --prompt kalomi --max-new-tokens 12 --temperature 0";
  auto text = [&](const std::string& args, const std::string& name) {
    const auto r = test::run_command(std::string(FSDP_TRAIN_BIN) + " generate " + args + flags,
                                     (root / (name + ".log")).string());
    EXPECT_EQ(r.code, 0) << r.out;
    std::string text;  // the printed lines, without the log's
    for (size_t p = 0, q; p < r.out.size(); p = q + 1) {
      q = r.out.find('\n', p);
      if (q == std::string::npos) q = r.out.size();
      if (r.out.compare(p, 1, "[") != 0) text += r.out.substr(p, q - p) + "\n";
    }
    return text;
  };
  const std::string from_ckpt = text("--checkpoint " + checkpoint(), "g1");
  EXPECT_EQ(text("--checkpoint " + base + " --adapter " + adapter, "g2"), from_ckpt);
  EXPECT_EQ(text("--checkpoint " + merged, "g3"), from_ckpt);
  EXPECT_NE(text("--checkpoint " + base, "g4"), from_ckpt);  // the adapters change the text
}

TEST_F(LoraCli, BadInputIsRefusedByName) {
  ASSERT_EQ(trained.code, 0) << trained.out;
  auto r = run("export --checkpoint " + checkpoint() + " --output " + (root / "x1").string(), "bad1");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("is a LoRA checkpoint"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--adapter"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(root / "x1"));
  // --merge on another base: the NF4 save of the same model is not the bytes trained on.
  r = run("export --checkpoint " + checkpoint() + " --output " + (root / "x2").string() + " --merge --base " +
              test::source_path("tests/golden/llama_bf16_tiny"),
          "bad2");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("not the same base model"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(root / "x2"));
  // An adapter with DoRA, and one for another base shape.
  const fs::path dora = root / "dora";
  fs::create_directories(dora);
  fs::copy_file(test::source_path("tests/golden/lora_tiny/r4_alpha8/adapter_model.safetensors"),
                dora / "adapter_model.safetensors");
  nlohmann::json j = nlohmann::json::parse(std::ifstream(test::source_path("tests/golden/lora_tiny/r4_alpha8/adapter_config.json")));
  j["use_dora"] = true;
  std::ofstream(dora / "adapter_config.json") << j.dump();
  r = run("train --config " + (root / "lora.yaml").string() + " --set run.dir=" + (root / "r3").string() +
              " --set lora.init_from=" + dora.string(),
          "bad3");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("DoRA (use_dora: true) is not supported"), std::string::npos) << r.out;
  r = run("train --config " + (root / "lora.yaml").string() + " --set run.dir=" + (root / "r4").string() +
              " --set model.init_from= --set model.preset=tiny --set model.num_layers=2",
          "bad4");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight' has shape [4, 48] but the "
                       "model expects [4, 128]"),
            std::string::npos)
      << r.out;
  r = run("train --config " + (root / "lora.yaml").string() + " --set lora.targets=qkv_proj", "bad5");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("lora.targets: 'qkv_proj' names no module of this model"), std::string::npos) << r.out;
  r = run("train --config " + (root / "lora.yaml").string() + " --set lora.rank=17 --set lora.init_from=", "bad6");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("lora.rank 17 is outside [1, 16] for layers.0.wk"), std::string::npos) << r.out;
}

// alpha and rslora are part of what trained adapters mean (the update is alpha / r B A, or
// alpha / sqrt(r) B A): resuming with either changed is refused like a changed rank, not
// continued with adapters scaled differently; the config's to fix before the first step (2).
TEST_F(LoraCli, ResumeRefusesAnotherAlphaOrRslora) {
  ASSERT_EQ(trained.code, 0) << trained.out;
  const fs::path copy = root / "resume_scale";
  fs::copy(root / "run", copy, fs::copy_options::recursive);
  const std::string args = "train --config " + (root / "lora.yaml").string() + " --set run.dir=" + copy.string() +
                           " --set train.max_steps=4";
  auto r = run(args + " --set lora.alpha=16", "alpha");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("was trained with lora.alpha 8, but this run has lora.alpha 16: its adapters would be scaled "
                       "differently"),
            std::string::npos)
      << r.out;
  r = run(args + " --set lora.rslora=true", "rslora");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("was trained with lora.rslora false, but this run has lora.rslora true"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("step      4/"), std::string::npos) << r.out;
  r = run(args + " --set lora.dropout=0.1", "dropout");  // a training choice: may change
  EXPECT_EQ(r.code, 0) << r.out;
}

// A base given as a relative model.init_from is recorded absolute, so `export --merge` and
// `generate` work from any directory; a base that moved is named as the checkpoint's
// recorded one, with --base to point at its new place.
TEST_F(LoraCli, ARelativeBaseIsRecordedAbsoluteAndAMovedOneNamesBase) {
  const fs::path base_copy = root / "rel_base";
  fs::create_directories(base_copy);
  for (const auto& e : fs::directory_iterator(base)) fs::copy_file(e.path(), base_copy / e.path().filename());
  const std::string bin = FSDP_TRAIN_BIN;
  auto in_dir = [&](const fs::path& cwd, const std::string& args, const std::string& name) {
    return test::run_command("cd " + cwd.string() + " && " + bin + " " + args, (root / (name + ".log")).string());
  };
  auto r = in_dir(root, "train --config lora.yaml --set model.init_from=rel_base --set lora.init_from= "
                        "--set train.max_steps=1 --set run.dir=rel_run", "rel_train");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string ckpt = (root / "rel_run" / "checkpoints").string();
  const ckpt::CheckpointReader reader(ckpt::list_checkpoints(ckpt).front());
  ASSERT_TRUE(reader.manifest().base.has_value());
  EXPECT_EQ(reader.manifest().base->path, base_copy.string());
  r = in_dir("/", "export --checkpoint " + ckpt + " --output " + (root / "rel_merged").string() + " --merge", "rel_m1");
  EXPECT_EQ(r.code, 0) << r.out;

  const fs::path moved = root / "moved_base";
  fs::rename(base_copy, moved);
  const std::string why = "holds adapters trained on the base " + base_copy.string() +
                          " (model.init_from, as its manifest records it), which is not there: pass --base DIR";
  r = in_dir("/", "export --checkpoint " + ckpt + " --output " + (root / "rel_m2").string() + " --merge", "rel_m2");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find(why), std::string::npos) << r.out;
  const std::string spm = test::made_up_tokenizer(root, 96);
  const std::string gen =
      "generate --checkpoint " + ckpt + " --tokenizer " + spm + " --prompt kalomi --max-new-tokens 2";
  r = in_dir("/", gen, "rel_g1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find(why), std::string::npos) << r.out;
  r = in_dir("/", gen + " --base " + moved.string(), "rel_g2");
  EXPECT_EQ(r.code, 0) << r.out;
  r = in_dir("/", "export --checkpoint " + ckpt + " --output " + (root / "rel_m3").string() + " --merge --base " +
                      moved.string(), "rel_m3");
  EXPECT_EQ(r.code, 0) << r.out;
  r = in_dir("/", gen + " --base " + moved.string() + " --adapter " + (root / "x").string(), "rel_g3");
  EXPECT_EQ(r.code, 2) << r.out;  // --base with --adapter: the base is --checkpoint then
}

}  // namespace
}  // namespace fsdp
