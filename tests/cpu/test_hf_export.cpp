// Hugging Face export (ckpt/hf_export.h): seeded units -> write_hf_llama -> the importer gives
// the same values back (bit for bit in float32, rounded to nearest even in bfloat16), through
// one file or several with an index; config.json reads back as the same LlamaConfig; bad
// output folders and failures midway leave the disk as it was.
//
// HfExportGolden is the proof against transformers: tests/golden/hf_export/check_transformers.py
// loaded this very export (same seed) with LlamaForCausalLM.from_pretrained and stored its
// logits and a checksum of every tensor it loaded; here our forward on the re-imported export
// must reproduce those logits, and our files those checksums.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include <nlohmann/json.hpp>

#include "fsdp/ckpt/hf_export.h"
#include "fsdp/ckpt/hf_import.h"
#include "fsdp/core/random.h"
#include "fsdp/data/tokenizer.h"
#include "fsdp/model/decoder.h"
#include "fsdp/model/param_init.h"
#include "fsdp/model/local_params.h"
#include "fsdp/ops/cross_entropy.h"
#include "test_util.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The model check_transformers.py saw: tiny, GQA (4 query heads on 2 kv heads), an
// intermediate size unlike the hidden size (so a transposed projection cannot load), and
// rope_theta / rms_norm_eps away from every reader's defaults (so a key left out of
// config.json changes the result).
model::LlamaConfig export_config() {
  model::LlamaConfig c;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 56;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.max_seq_len = 64;
  c.rope_theta = 50000.0;
  c.norm_eps = 1e-5;
  return c;
}
constexpr uint64_t kSeed = 20240611;
// Larger than training's 0.02 so activations (and any mix-up of tensors) are far from zero.
constexpr double kInitStd = 0.2;

// model::init_unit, then every norm weight 1 + 0.1 N(0, 1): init_unit makes them all ones,
// and with all-ones norms a swapped or dropped norm weight would not change the logits.
std::vector<Tensor> seeded_units(const std::vector<model::UnitLayout>& units, uint64_t seed) {
  std::vector<Tensor> out;
  for (int u = 0; u < int(units.size()); ++u) {
    Tensor flat = Tensor::empty({units[size_t(u)].numel}, DType::F32);
    model::init_unit(units[size_t(u)], u, seed, kInitStd, flat);
    const uint64_t key = mix_key(seed, 0x6e6f726du, uint64_t(u));
    for (const auto& p : units[size_t(u)].params) {
      if (p.init_kind != 1) continue;
      for (int64_t i = p.offset; i < p.offset + p.numel; ++i) flat.set_flat(i, float(1.0 + 0.1 * normal01(key, uint64_t(i))));
    }
    out.push_back(flat);
  }
  return out;
}

// A fresh folder under the system temp dir, removed with everything in it.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    path = fs::temp_directory_path() / ("fsdp_hf_export_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

void export_to(const std::string& dir, const model::LlamaConfig& cfg, const std::vector<Tensor>& params,
               const ckpt::HfExportOptions& opt) {
  ckpt::write_hf_llama(dir, cfg, model::llama_units(cfg), [&](int u) { return params[size_t(u)]; }, opt);
}

ckpt::HfExportOptions with_dtype(DType dtype) {
  ckpt::HfExportOptions o;
  o.dtype = dtype;
  return o;
}

// Every unit of `dir` imported through load_hf_unit.
std::vector<Tensor> import_units(const std::string& dir, const std::vector<model::UnitLayout>& units) {
  const ckpt::SafetensorsFolder folder(dir);
  std::vector<Tensor> out;
  for (const auto& unit : units) {
    out.push_back(Tensor::empty({unit.numel}, DType::F32));
    ckpt::load_hf_unit(folder, unit, out.back());
  }
  return out;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

json read_json(const std::string& path) { return json::parse(read_bytes(path)); }

// Names in `dir`'s parent that start with dir's name + ".tmp-": what a failed export must not leave.
std::vector<std::string> tmp_siblings(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir.parent_path())) {
    if (e.path().filename().string().rfind(dir.filename().string() + ".tmp-", 0) == 0) out.push_back(e.path());
  }
  return out;
}

std::string tokenizer_fixture() { return test::source_path("tests/golden/hf_export/tokenizer.model"); }

TEST(HfExport, Float32RoundTripIsBitExact) {
  const TempDir tmp("f32");
  const auto cfg = export_config();
  const auto units = model::llama_units(cfg);
  const auto params = seeded_units(units, kSeed);
  export_to(tmp / "out", cfg, params, with_dtype(DType::F32));

  // One shard under the default 5 GB: model.safetensors, no index, transformers' metadata.
  EXPECT_TRUE(fs::exists(tmp / "out/model.safetensors"));
  EXPECT_FALSE(fs::exists(tmp / "out/model.safetensors.index.json"));
  const ckpt::SafetensorsFile file(tmp / "out/model.safetensors");
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.names().size(), size_t(2 + 9 * cfg.num_layers + 1));
  for (const auto& name : file.names()) EXPECT_EQ(file.entry(name).dtype, "F32") << name;

  const auto back = import_units(tmp / "out", units);
  for (size_t u = 0; u < units.size(); ++u) EXPECT_TRUE(test::same_bits(back[u], params[u])) << units[u].name;
  EXPECT_TRUE(tmp_siblings(tmp.path / "out").empty());
}

TEST(HfExport, Bfloat16RoundsToNearestEven) {
  const TempDir tmp("bf16");
  const auto cfg = export_config();
  const auto units = model::llama_units(cfg);
  auto params = seeded_units(units, kSeed);
  // Three values whose bf16 rounding tells round-to-nearest-even from truncation: two exact
  // ties (to the even neighbour: down, then up) and one just above a tie.
  const uint32_t cases[3] = {0x3F808000u, 0x3F818000u, 0x3F80C000u};
  const uint16_t want_bits[3] = {0x3F80u, 0x3F82u, 0x3F81u};
  float* emb = params[0].data<float>();
  for (int i = 0; i < 3; ++i) std::memcpy(&emb[i], &cases[i], 4);
  export_to(tmp / "out", cfg, params, {});  // the default is bfloat16

  const ckpt::SafetensorsFolder folder(tmp / "out");
  for (const auto& name : folder.names()) EXPECT_EQ(folder.entry(name).dtype, "BF16") << name;
  const auto* raw = reinterpret_cast<const uint16_t*>(folder.entry("model.embed_tokens.weight").data);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(raw[i], want_bits[i]) << i;

  const auto back = import_units(tmp / "out", units);
  for (size_t u = 0; u < units.size(); ++u) {
    const float* a = back[u].data<float>();
    const float* p = params[u].data<float>();
    for (int64_t i = 0; i < units[u].numel; ++i) {
      ASSERT_EQ(bf16_to_float(float_to_bf16(p[i])), a[i]) << units[u].name << " " << i;
    }
  }
  EXPECT_EQ(read_json(tmp / "out/config.json")["torch_dtype"], "bfloat16");
}

TEST(HfExport, ConfigReadsBackAsTheSameLlamaConfig) {
  const TempDir tmp("config");
  for (const char* preset : {"tiny", "llama2_70b", "codellama_7b"}) {
    // Shapes and hyper-parameters of real presets, with one layer and a small vocab so the
    // weights stay small; only config.json matters here.
    model::LlamaConfig cfg = model::llama_preset(preset);
    cfg.num_layers = 1;
    cfg.vocab_size = 16;
    cfg.hidden_size = cfg.num_heads * 2;
    cfg.intermediate_size = 8;
    const auto units = model::llama_units(cfg);
    std::vector<Tensor> params;
    for (const auto& u : units) params.push_back(Tensor::zeros({u.numel}, DType::F32));
    ckpt::HfExportOptions opt;
    opt.bos_token_id = 1;
    opt.eos_token_id = 2;
    const std::string dir = tmp / preset;
    export_to(dir, cfg, params, opt);

    const model::LlamaConfig back = ckpt::read_hf_llama_config(dir);
    EXPECT_EQ(back.vocab_size, cfg.vocab_size) << preset;
    EXPECT_EQ(back.hidden_size, cfg.hidden_size) << preset;
    EXPECT_EQ(back.intermediate_size, cfg.intermediate_size) << preset;
    EXPECT_EQ(back.num_layers, cfg.num_layers) << preset;
    EXPECT_EQ(back.num_heads, cfg.num_heads) << preset;
    EXPECT_EQ(back.num_kv_heads, cfg.num_kv_heads) << preset;
    EXPECT_EQ(back.max_seq_len, cfg.max_seq_len) << preset;
    EXPECT_EQ(back.rope_theta, cfg.rope_theta) << preset;  // exact: JSON doubles round-trip
    EXPECT_EQ(back.norm_eps, cfg.norm_eps) << preset;

    const json j = read_json(dir + "/config.json");
    EXPECT_EQ(j["architectures"], json::array({"LlamaForCausalLM"}));
    EXPECT_EQ(j["model_type"], "llama");
    EXPECT_EQ(j["hidden_act"], "silu");
    EXPECT_EQ(j["tie_word_embeddings"], false);
    EXPECT_EQ(j["attention_bias"], false);
    EXPECT_EQ(j["mlp_bias"], false);
    EXPECT_EQ(j["head_dim"], cfg.head_dim());
    EXPECT_EQ(j["bos_token_id"], 1);
    EXPECT_EQ(j["eos_token_id"], 2);
  }
  // Without a tokenizer or explicit ids, config.json says nothing about BOS/EOS.
  const auto cfg = export_config();
  export_to(tmp / "noids", cfg, seeded_units(model::llama_units(cfg), kSeed), {});
  const json j = read_json(tmp / "noids/config.json");
  EXPECT_FALSE(j.contains("bos_token_id"));
  EXPECT_FALSE(j.contains("eos_token_id"));
}

TEST(HfExport, ShardPlanFollowsTransformers) {
  std::vector<int> of;
  EXPECT_EQ(ckpt::hf_shard_plan({10, 10, 10}, 100, &of), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(of, (std::vector<int>{0, 0, 0}));
  // Greedy: a new file when the next tensor would push past the limit; exactly full is fine.
  EXPECT_EQ(ckpt::hf_shard_plan({10, 10, 10, 5}, 25, &of),
            (std::vector<std::string>{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}));
  EXPECT_EQ(of, (std::vector<int>{0, 0, 1, 1}));
  // A tensor over the limit sits alone; the next one starts a new file.
  EXPECT_EQ(ckpt::hf_shard_plan({5, 30, 5, 5}, 20, &of).size(), 3u);
  EXPECT_EQ(of, (std::vector<int>{0, 1, 2, 2}));
  EXPECT_ERROR_MENTIONS(ckpt::hf_shard_plan({1}, 0, &of), "max_shard_bytes");
}

TEST(HfExport, SeveralShardsWithAnIndexTheImporterOpens) {
  const TempDir tmp("shards");
  const auto cfg = export_config();
  const auto units = model::llama_units(cfg);
  const auto params = seeded_units(units, kSeed);
  ckpt::HfExportOptions opt = with_dtype(DType::F32);
  opt.max_shard_bytes = 20'000;  // ~95 kB of weights: 5 or more files
  opt.metadata = {{"producer", "fsdp_train test"}};
  export_to(tmp / "out", cfg, params, opt);

  const json index = read_json(tmp / "out/model.safetensors.index.json");
  std::set<std::string> files;
  uint64_t total = 0;
  for (const auto& [tensor, file] : index["weight_map"].items()) files.insert(file.get<std::string>());
  EXPECT_GE(files.size(), 5u);
  for (const auto& f : files) {
    EXPECT_EQ(f.find("-of-" + fmt::format("{:05d}", files.size())), 11u) << f;  // model-0000i-of-0000n
    const ckpt::SafetensorsFile shard(tmp / ("out/" + f));
    EXPECT_EQ(shard.metadata().at("format"), "pt");
    EXPECT_EQ(shard.metadata().at("producer"), "fsdp_train test");
    uint64_t bytes = 0;
    for (const auto& n : shard.names()) bytes += shard.entry(n).nbytes;
    EXPECT_LE(bytes, opt.max_shard_bytes) << f;  // no tensor here exceeds the limit alone
    total += bytes;
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  EXPECT_EQ(index["weight_map"].size(), size_t(2 + 9 * cfg.num_layers + 1));
  EXPECT_FALSE(fs::exists(tmp / "out/model.safetensors"));

  const ckpt::SafetensorsFolder folder(tmp / "out");
  EXPECT_EQ(folder.files().size(), files.size());
  const auto back = import_units(tmp / "out", units);
  for (size_t u = 0; u < units.size(); ++u) EXPECT_TRUE(test::same_bits(back[u], params[u])) << units[u].name;
}

TEST(HfExport, GqaAndMultiHeadShapes) {
  const TempDir tmp("gqa");
  for (int64_t kv : {2, 4}) {  // 4 query heads on 2 kv heads, and plain multi-head attention
    model::LlamaConfig cfg = export_config();
    cfg.num_kv_heads = kv;
    const std::string dir = tmp / ("kv" + std::to_string(kv));
    export_to(dir, cfg, seeded_units(model::llama_units(cfg), kSeed), with_dtype(DType::F32));
    const ckpt::SafetensorsFolder folder(dir);
    const int64_t C = cfg.hidden_size, D = cfg.head_dim();
    for (int l = 0; l < 2; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      EXPECT_EQ(folder.entry(p + "self_attn.q_proj.weight").shape, (std::vector<int64_t>{4 * D, C}));
      EXPECT_EQ(folder.entry(p + "self_attn.k_proj.weight").shape, (std::vector<int64_t>{kv * D, C}));
      EXPECT_EQ(folder.entry(p + "self_attn.v_proj.weight").shape, (std::vector<int64_t>{kv * D, C}));
      EXPECT_EQ(folder.entry(p + "self_attn.o_proj.weight").shape, (std::vector<int64_t>{C, 4 * D}));
      EXPECT_EQ(folder.entry(p + "mlp.down_proj.weight").shape, (std::vector<int64_t>{C, 56}));
    }
    EXPECT_EQ(ckpt::read_hf_llama_config(dir).num_kv_heads, kv);
  }
}

TEST(HfExport, RefusesANonEmptyFolderAndLeavesItAlone) {
  const TempDir tmp("nonempty");
  const auto cfg = export_config();
  const auto params = seeded_units(model::llama_units(cfg), kSeed);
  fs::create_directories(tmp / "out");
  std::ofstream(tmp / "out/notes.txt") << "keep me";
  EXPECT_ERROR_MENTIONS(export_to(tmp / "out", cfg, params, {}), tmp / "out");
  EXPECT_EQ(read_bytes(tmp / "out/notes.txt"), "keep me");
  EXPECT_EQ(std::distance(fs::directory_iterator(tmp / "out"), fs::directory_iterator()), 1);
  EXPECT_TRUE(tmp_siblings(tmp.path / "out").empty());

  // A file where the folder should be is refused too; an existing empty folder is used.
  std::ofstream(tmp / "file") << "x";
  EXPECT_ERROR_MENTIONS(export_to(tmp / "file", cfg, params, {}), "is not a directory");
  fs::create_directories(tmp / "empty");
  export_to(tmp / "empty/", cfg, params, {});
  EXPECT_TRUE(fs::exists(tmp / "empty/model.safetensors"));
}

TEST(HfExport, UnwritablePlaceIsNamed) {
  const TempDir tmp("unwritable");
  const auto cfg = export_config();
  const auto params = seeded_units(model::llama_units(cfg), kSeed);
  // A parent that is a file cannot hold a folder, for root as for anyone.
  std::ofstream(tmp / "plain") << "x";
  EXPECT_ERROR_MENTIONS(export_to(tmp / "plain/out", cfg, params, {}), tmp / "plain");

  // A read-only folder. Root ignores permissions, so as root the export runs in a child
  // that has dropped to `nobody` (65534); the child reports through its exit status.
  const fs::path ro = tmp.path / "readonly";
  fs::create_directories(ro);
  fs::permissions(tmp.path, fs::perms::all, fs::perm_options::add);
  fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                          fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  const std::string out = (ro / "out").string();
  const auto attempt = [&]() -> int {  // 0: refused naming the folder; 1: wrong message; 2: no error
    try {
      export_to(out, cfg, params, {});
    } catch (const Error& e) {
      return std::string(e.what()).find(out + ".tmp-") != std::string::npos ? 0 : 1;
    }
    return 2;
  };
  if (::geteuid() != 0) {
    EXPECT_EQ(attempt(), 0);
  } else {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) ::_exit(::setgid(65534) == 0 && ::setuid(65534) == 0 ? attempt() : 3);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    if (WEXITSTATUS(status) == 3) GTEST_SKIP() << "cannot drop root privileges to test a read-only folder";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "1: error without the path, 2: no error";
  }
  EXPECT_FALSE(fs::exists(out));
}

TEST(HfExport, FailureMidwayLeavesNothingBehind) {
  const TempDir tmp("midway");
  const auto cfg = export_config();
  const auto units = model::llama_units(cfg);
  auto params = seeded_units(units, kSeed);
  ckpt::HfExportOptions opt = with_dtype(DType::F32);
  opt.max_shard_bytes = 20'000;  // several shards are already written when the failure comes
  // 1. The caller's gather fails on the last unit.
  const auto failing = [&](int u) -> Tensor {
    if (u == int(units.size()) - 1) FSDP_FAIL("gather of unit {} failed", u);
    return params[size_t(u)];
  };
  fs::create_directories(tmp / "out");  // an empty folder stays an empty folder
  EXPECT_ERROR_MENTIONS(ckpt::write_hf_llama(tmp / "out", cfg, units, failing, opt), "gather of unit");
  EXPECT_TRUE(fs::is_empty(tmp / "out"));
  EXPECT_TRUE(tmp_siblings(tmp.path / "out").empty());

  // 2. A NaN weight is refused by name, not written.
  params[2].set_flat(units[2].slot("layers.1.w_up").offset + 7, std::nan(""));
  test::expect_error([&] { export_to(tmp / "nan", cfg, params, opt); },
                     {"model.layers.1.mlp.up_proj.weight", "non-finite", "element 7"});
  EXPECT_FALSE(fs::exists(tmp / "nan"));
  EXPECT_TRUE(tmp_siblings(tmp.path / "nan").empty());

  // 3. A finite value too large for bfloat16 is refused rather than written as infinity.
  params[2].set_flat(units[2].slot("layers.1.w_up").offset + 7, 3.3999e38);
  EXPECT_ERROR_MENTIONS(export_to(tmp / "big", cfg, params, {}), "overflows bfloat16");
  EXPECT_FALSE(fs::exists(tmp / "big"));
}

TEST(HfExport, RefusesBadArguments) {
  const TempDir tmp("args");
  const auto cfg = export_config();
  const auto units = model::llama_units(cfg);
  const auto params = seeded_units(units, kSeed);
  const auto exporter = [&](int u) { return params[size_t(u)]; };
  model::LlamaConfig other = cfg;
  other.intermediate_size = 48;
  EXPECT_ERROR_MENTIONS(ckpt::write_hf_llama(tmp / "a", other, units, exporter, {}), "layers.0");
  EXPECT_ERROR_MENTIONS(ckpt::write_hf_llama(tmp / "b", cfg, units, [](int) { return Tensor::zeros({5}, DType::F32); }, {}),
                        "unit 'embedding'");
  EXPECT_ERROR_MENTIONS(export_to(tmp / "c", cfg, params, with_dtype(DType::F16)), "float16");
  ckpt::HfExportOptions opt;
  opt.tokenizer_model = tmp / "missing.model";
  EXPECT_ERROR_MENTIONS(export_to(tmp / "d", cfg, params, opt), "missing.model");
  opt = {};
  opt.eos_token_id = 64;
  EXPECT_ERROR_MENTIONS(export_to(tmp / "e", cfg, params, opt), "eos_token_id 64");
  opt = {};
  opt.metadata = {{"format", "np"}};
  EXPECT_ERROR_MENTIONS(export_to(tmp / "f", cfg, params, opt), "'format'");
  for (const char* d : {"a", "b", "c", "d", "e", "f"}) EXPECT_FALSE(fs::exists(tmp / d)) << d;
}

TEST(HfExport, TokenizerIsCopiedWithItsSpecialPieces) {
  const TempDir tmp("tokenizer");
  const auto cfg = export_config();
  ckpt::HfExportOptions opt;
  opt.tokenizer_model = tokenizer_fixture();
  export_to(tmp / "out", cfg, seeded_units(model::llama_units(cfg), kSeed), opt);
  EXPECT_EQ(read_bytes(tmp / "out/tokenizer.model"), read_bytes(tokenizer_fixture()));
  const json t = read_json(tmp / "out/tokenizer_config.json");
  EXPECT_EQ(t["tokenizer_class"], "LlamaTokenizer");
  EXPECT_EQ(t["bos_token"], "<s>");
  EXPECT_EQ(t["eos_token"], "</s>");
  EXPECT_EQ(t["unk_token"], "<unk>");
  EXPECT_TRUE(t["pad_token"].is_null());
  EXPECT_EQ(t["add_bos_token"], true);
  EXPECT_EQ(t["model_max_length"], 64);
  const json c = read_json(tmp / "out/config.json");  // ids from the tokenizer
  EXPECT_EQ(c["bos_token_id"], 1);
  EXPECT_EQ(c["eos_token_id"], 2);
}

// ---- against transformers ---------------------------------------------------------------

// The fp32 and bf16 exports check_transformers.py loads, with the committed tokenizer.
void write_script_exports(const std::string& dir) {
  const auto cfg = export_config();
  const auto params = seeded_units(model::llama_units(cfg), kSeed);
  for (const auto& [name, dtype] : {std::pair{"fp32", DType::F32}, std::pair{"bf16", DType::BF16}}) {
    ckpt::HfExportOptions opt = with_dtype(dtype);
    opt.tokenizer_model = tokenizer_fixture();
    export_to(dir + "/" + name, cfg, params, opt);
  }
}

// Not a check: check_transformers.py runs this with FSDP_HF_EXPORT_OUT=DIR to get the exports.
TEST(HfExportScript, WriteExports) {
  const char* dir = std::getenv("FSDP_HF_EXPORT_OUT");
  if (dir == nullptr) GTEST_SKIP() << "set FSDP_HF_EXPORT_OUT=DIR to write the exports check_transformers.py loads";
  write_script_exports(dir);
}

class HfExportGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    fixture_ = std::make_unique<ckpt::SafetensorsFile>(test::source_path("tests/golden/hf_export/expected.safetensors"));
    meta_ = json::parse(fixture_->metadata().at("fixture"));
  }
  std::unique_ptr<ckpt::SafetensorsFile> fixture_;
  json meta_;
};

// The bytes of every tensor in our export are those transformers loaded (FNV-1a 64 of each
// tensor's raw little-endian bytes, fp32 and bf16), and the tokenizer encodes alike.
TEST_F(HfExportGolden, ExportedBytesAreWhatTransformersLoaded) {
  const TempDir tmp("golden_bytes");
  write_script_exports(tmp.path.string());
  for (const char* dtype : {"fp32", "bf16"}) {
    const ckpt::SafetensorsFolder folder(tmp / dtype);
    const json& want = meta_["fnv1a64"][dtype];
    ASSERT_EQ(want.size(), folder.names().size()) << dtype;
    for (const auto& name : folder.names()) {
      const ckpt::TensorEntry& e = folder.entry(name);
      EXPECT_EQ(fmt::format("{:016x}", data::fnv1a64(e.data, e.nbytes)), want.at(name).get<std::string>())
          << dtype << " " << name;
    }
  }
  const data::Tokenizer tok(tmp / "fp32/tokenizer.model");
  std::vector<int32_t> ids = {tok.bos_id()};
  tok.encode(meta_["tokenizer_text"].get<std::string>(), ids);
  const auto want = ckpt::read_as_i64(fixture_->entry("tokenizer_ids"));
  EXPECT_EQ(std::vector<int64_t>(ids.begin(), ids.end()), want);
}

// Tolerance 1e-5 norm-wise, as the whole-model golden test: both sides compute in fp32 (HF's
// own fp32 error against a float64 run of the same model is printed by the script, ~5e-7),
// while a wrong tensor name, a transposed weight, a lost norm weight or a wrong rope_theta
// moves these logits by far more than 1e-2.
TEST_F(HfExportGolden, OurForwardOnTheReimportedExportMatchesTransformersLogits) {
  const TempDir tmp("golden_logits");
  write_script_exports(tmp.path.string());
  const model::LlamaConfig cfg = ckpt::read_hf_llama_config(tmp / "fp32");
  model::Llama llama(cfg);
  model::LocalParams params(llama.units());
  const ckpt::SafetensorsFolder folder(tmp / "fp32");
  for (int u = 0; u < int(llama.units().size()); ++u) ckpt::load_hf_unit(folder, llama.units()[u], params.params(u));

  const ckpt::TensorEntry& ids_entry = fixture_->entry("input_ids");
  const int64_t B = ids_entry.shape[0], T = ids_entry.shape[1];
  const auto ids = ckpt::read_as_i64(ids_entry);
  model::LlamaActivations act(cfg, B, T, DType::F32, Device::cpu());
  for (int64_t i = 0; i < B * T; ++i) {
    act.ids.set({i}, double(ids[size_t(i)]));
    act.targets.set({i}, (i + 1) % T != 0 ? double(ids[size_t(i + 1)]) : double(kIgnoreIndex));
  }
  const auto want = ckpt::read_as_f32(fixture_->entry("logits"));
  ASSERT_EQ(int64_t(want.size()), act.logits.numel());
  Tensor ref = Tensor::empty({int64_t(want.size())}, DType::F64);
  for (size_t i = 0; i < want.size(); ++i) ref.set_flat(int64_t(i), want[i]);
  const auto error = [&](model::Llama& m) {
    m.forward(act, params);
    return test::rel_error(act.logits, ref);
  };
  const double err = error(llama);
  EXPECT_LT(err, 1e-5);
  RecordProperty("rel_error", fmt::format("{:.2e}", err));

  // The fixture tells mistakes apart: swapping layer 0's two norm weights, or running with
  // another rope_theta than config.json's, each moves the logits by more than 1e-3.
  const model::UnitLayout& block = llama.units()[1];
  const Tensor attn_norm = block.view(params.params(1), "layers.0.attn_norm");
  const Tensor mlp_norm = block.view(params.params(1), "layers.0.mlp_norm");
  const Tensor saved = attn_norm.clone();
  attn_norm.copy_(mlp_norm);
  mlp_norm.copy_(saved);
  EXPECT_GT(error(llama), 1e-3);
  mlp_norm.copy_(attn_norm);
  attn_norm.copy_(saved);
  model::LlamaConfig theta = cfg;
  theta.rope_theta = 10000.0;
  model::Llama other(theta);
  EXPECT_GT(error(other), 1e-3);
}

}  // namespace
}  // namespace fsdp
