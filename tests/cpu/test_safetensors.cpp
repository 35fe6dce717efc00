// safetensors reader/writer: the golden Hugging Face fixtures in tests/golden (sharded fp32 folder,
// bf16 folder, expected outputs), a writer round trip, exact dtype conversion, and one test per kind
// of bad input, each built by hand in a temporary folder.
#include "fsdp/ckpt/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fsdp/core/error.h"
#include "test_util.h"

namespace fsdp::ckpt {
namespace {

namespace fs = std::filesystem;
using test::expect_error;

const std::string kGolden = std::string(FSDP_SOURCE_DIR) + "/tests/golden";
const std::string kGqa = kGolden + "/llama_gqa_tiny";
const std::string kBf16 = kGolden + "/llama_bf16_tiny";

// The 21 parameters of the tiny Llama (2 layers x 9 + embed, final norm, untied lm_head).
std::vector<std::string> llama_param_names() {
  std::vector<std::string> names = {"lm_head.weight", "model.embed_tokens.weight", "model.norm.weight"};
  for (int l = 0; l < 2; ++l) {
    for (const char* p : {"input_layernorm", "post_attention_layernorm", "mlp.down_proj", "mlp.gate_proj",
                          "mlp.up_proj", "self_attn.k_proj", "self_attn.o_proj", "self_attn.q_proj",
                          "self_attn.v_proj"}) {
      names.push_back(fmt::format("model.layers.{}.{}.weight", l, p));
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(SafetensorsFolder, ReadsShardedGoldenFixtureThroughIndex) {
  SafetensorsFolder folder(kGqa);
  // Only the two shards in the index are opened; expected.safetensors in the same folder is not.
  ASSERT_EQ(folder.files().size(), 2u);
  EXPECT_EQ(folder.names(), llama_param_names());
  EXPECT_EQ(fs::path(folder.file_of("model.layers.0.self_attn.q_proj.weight").path()).filename(),
            "model-00001-of-00002.safetensors");
  EXPECT_EQ(fs::path(folder.file_of("lm_head.weight").path()).filename(), "model-00002-of-00002.safetensors");

  const TensorEntry& k = folder.entry("model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(k.dtype, "F32");
  EXPECT_EQ(k.shape, (std::vector<int64_t>{16, 48}));  // 2 kv heads x head_dim 8, hidden 48
  EXPECT_EQ(k.nbytes, 16u * 48u * 4u);
  EXPECT_EQ(folder.entry("model.embed_tokens.weight").shape, (std::vector<int64_t>{96, 48}));
  EXPECT_EQ(folder.entry("model.layers.1.mlp.down_proj.weight").shape, (std::vector<int64_t>{48, 88}));

  // Values printed by the generator (safetensors.safe_open in Python).
  const auto embed = read_as_f32(folder.entry("model.embed_tokens.weight"));
  EXPECT_EQ(embed[0], -0.0223437137901783f);
  EXPECT_EQ(embed[1], -0.0993180200457573f);
  EXPECT_EQ(embed[2], 0.03261474147439003f);
  EXPECT_EQ(read_as_f32(folder.entry("model.layers.1.mlp.down_proj.weight"))[47 * 88 + 87], 0.19925405085086823f);
  EXPECT_EQ(read_as_f32(folder.entry("model.norm.weight"))[1], 1.0156327486038208f);
}

TEST(SafetensorsFile, ReadsGoldenExpectedOutputs) {
  SafetensorsFile file(kGqa + "/expected.safetensors");
  const TensorEntry& ids = file.entry("input_ids");
  EXPECT_EQ(ids.dtype, "I64");
  EXPECT_EQ(ids.shape, (std::vector<int64_t>{2, 13}));
  const auto labels = read_as_i64(file.entry("labels"));
  const auto id_values = read_as_i64(ids);
  for (int i = 0; i < 26; ++i) {
    const bool ignored = i == 4 || i == 13 + 7 || i == 13 + 12;
    EXPECT_EQ(labels[i], ignored ? -100 : id_values[i]) << i;
  }
  EXPECT_EQ(id_values[0], 43);
  EXPECT_EQ(file.entry("logits").shape, (std::vector<int64_t>{2, 13, 96}));
  EXPECT_EQ(read_as_f32(file.entry("logits"))[(13 + 12) * 96 + 95], -1.026901364326477f);
  const TensorEntry& loss = file.entry("loss");
  EXPECT_TRUE(loss.shape.empty());  // a scalar, like torch's loss
  EXPECT_EQ(loss.numel(), 1);
  EXPECT_EQ(read_as_f32(loss)[0], 6.069887638092041f);
  for (const auto& name : llama_param_names()) {
    EXPECT_EQ(file.entry("grad." + name).shape, SafetensorsFolder(kGqa).entry(name).shape) << name;
  }
  EXPECT_NE(file.metadata().at("fixture").find("transformers"), std::string::npos);
}

// fp32 -> bf16 round to nearest even, as torch's .to(torch.bfloat16) does (inputs are finite).
uint16_t f32_to_bf16_rne(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

TEST(SafetensorsFolder, Bf16FixtureConvertsExactlyToItsReference) {
  SafetensorsFolder folder(kBf16);
  // No index: model.safetensors alone (the reference copy lives in reference/: beside it, it would be refused).
  ASSERT_EQ(folder.files().size(), 1u);
  EXPECT_EQ(fs::path(folder.files()[0]).filename(), "model.safetensors");
  SafetensorsFile reference(kBf16 + "/reference/reference_f32.safetensors");
  SafetensorsFolder f32_folder(kGqa);
  EXPECT_EQ(folder.names(), llama_param_names());
  for (const auto& name : folder.names()) {
    const TensorEntry& e = folder.entry(name);
    EXPECT_EQ(e.dtype, "BF16") << name;
    const auto got = read_as_f32(e);
    const auto want = read_as_f32(reference.entry(name));
    ASSERT_EQ(got.size(), want.size()) << name;
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << name;
    // And the bf16 file is the fp32 fixture rounded to nearest even.
    const auto f32 = read_as_f32(f32_folder.entry(name));
    for (size_t i = 0; i < f32.size(); ++i) {
      uint16_t raw;
      std::memcpy(&raw, e.data + 2 * i, 2);
      ASSERT_EQ(raw, f32_to_bf16_rne(f32[i])) << name << "[" << i << "]";
    }
  }
}

// A TensorEntry over caller-owned bytes, for the converters.
template <typename T>
TensorEntry entry_over(const std::vector<T>& v, const std::string& dtype) {
  TensorEntry e;
  e.name = "t";
  e.file = "memory";
  e.dtype = dtype;
  e.shape = {static_cast<int64_t>(v.size())};
  e.data = reinterpret_cast<const std::byte*>(v.data());
  e.nbytes = v.size() * sizeof(T);
  return e;
}

TEST(SafetensorsConvert, F16SpecialValuesAndSubnormalsAreExact) {
  const std::vector<uint16_t> h = {0x0001, 0x03FF, 0x0400, 0x3C00, 0xC000, 0x7BFF,
                                   0x7C00, 0xFC00, 0x7E00, 0x8000, 0x8001, 0x3555};
  const auto f = read_as_f32(entry_over(h, "F16"));
  EXPECT_EQ(f[0], std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f[1], std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(f[2], std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(f[3], 1.0f);
  EXPECT_EQ(f[4], -2.0f);
  EXPECT_EQ(f[5], 65504.0f);
  EXPECT_EQ(f[6], INFINITY);
  EXPECT_EQ(f[7], -INFINITY);
  EXPECT_TRUE(std::isnan(f[8]));
  EXPECT_TRUE(f[9] == 0.0f && std::signbit(f[9]));
  EXPECT_EQ(f[10], -std::ldexp(1.0f, -24));
  EXPECT_EQ(f[11], 0.333251953125f);
}

#if defined(__FLT16_MAX__)
TEST(SafetensorsConvert, F16MatchesCompilerFloat16OnEveryBitPattern) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  const auto f = read_as_f32(entry_over(all, "F16"));
  for (uint32_t i = 0; i < 65536; ++i) {
    _Float16 h;
    std::memcpy(&h, &all[i], 2);
    const float want = static_cast<float>(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f[i])) << std::hex << i;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(f[i]), std::bit_cast<uint32_t>(want)) << std::hex << i;
    }
  }
}
#endif

TEST(SafetensorsConvert, Bf16F64AndIntegers) {
  const std::vector<uint16_t> b = {0x0001, 0x3F80, 0x7F80, 0xFF80, 0x7FC0, 0x8000, 0xC0A0};
  const auto f = read_as_f32(entry_over(b, "BF16"));
  EXPECT_EQ(f[0], std::ldexp(1.0f, -133));  // smallest bf16 subnormal
  EXPECT_EQ(f[1], 1.0f);
  EXPECT_EQ(f[2], INFINITY);
  EXPECT_EQ(f[3], -INFINITY);
  EXPECT_TRUE(std::isnan(f[4]));
  EXPECT_TRUE(f[5] == 0.0f && std::signbit(f[5]));
  EXPECT_EQ(f[6], -5.0f);

  const std::vector<double> d = {0.1, -1e300, 1e-50, 3.0};
  const auto fd = read_as_f32(entry_over(d, "F64"));
  EXPECT_EQ(fd[0], 0.1f);
  EXPECT_EQ(fd[1], -INFINITY);
  EXPECT_EQ(fd[2], 0.0f);
  EXPECT_EQ(fd[3], 3.0f);

  const std::vector<int32_t> i32 = {-100, 0, 2147483647};
  EXPECT_EQ(read_as_i64(entry_over(i32, "I32")), (std::vector<int64_t>{-100, 0, 2147483647}));
}

// Every test below works in its own temporary folder.
class SafetensorsTmp : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / fmt::format("fsdp_st_{}_{}", ::getpid(), info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A file with the given header length field, header text and data bytes.
  std::string write_raw(const std::string& name, uint64_t header_len, const std::string& header,
                        const std::string& data) const {
    std::ofstream out(path(name), std::ios::binary);
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(header_len >> (8 * i)));
    out << header << data;
    return path(name);
  }
  std::string write_raw(const std::string& name, const std::string& header, const std::string& data) const {
    return write_raw(name, header.size(), header, data);
  }

  fs::path dir_;
};

using SafetensorsWriter = SafetensorsTmp;
using SafetensorsBadInput = SafetensorsTmp;

TEST_F(SafetensorsWriter, RoundTripsDtypesShapesAndMetadata) {
  const std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, 1e-40f, -7.0f};
  const std::vector<uint16_t> bf = {0x3F80, 0x7F80, 0x0001};
  const std::vector<int64_t> ids = {-100, 5, 1LL << 40};
  const std::vector<uint8_t> flags = {1, 0, 1, 1, 0};
  const float scalar = 6.25f;
  const std::string file = path("out.safetensors");
  // U8 first on purpose: the writer must still align the 8-byte I64 tensor.
  write_safetensors(file,
                    {{"flags", "U8", {5}, flags.data(), flags.size()},
                     {"w", "F32", {2, 3}, w.data(), w.size() * 4},
                     {"bf", "BF16", {3}, bf.data(), bf.size() * 2},
                     {"ids", "I64", {3}, ids.data(), ids.size() * 8},
                     {"loss", "F32", {}, &scalar, 4},
                     {"empty", "F32", {0, 4}, nullptr, 0}},
                    {{"format", "pt"}, {"step", "7"}});
  EXPECT_FALSE(fs::exists(file + ".tmp"));

  SafetensorsFile f(file);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"bf", "empty", "flags", "ids", "loss", "w"}));
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"step", "7"}}));
  EXPECT_EQ(f.entry("w").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(read_as_f32(f.entry("w")), w);
  EXPECT_EQ(read_as_i64(f.entry("ids")), ids);
  EXPECT_EQ(std::memcmp(f.entry("flags").data, flags.data(), flags.size()), 0);
  EXPECT_EQ(f.entry("flags").dtype, "U8");
  EXPECT_EQ(read_as_f32(f.entry("bf"))[2], std::ldexp(1.0f, -133));
  EXPECT_TRUE(f.entry("loss").shape.empty());
  EXPECT_EQ(read_as_f32(f.entry("loss")), std::vector<float>{6.25f});
  EXPECT_EQ(f.entry("empty").nbytes, 0u);
  EXPECT_TRUE(read_as_f32(f.entry("empty")).empty());
  for (const auto& name : f.names()) {
    const auto& e = f.entry(name);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(e.data) % safetensors_dtype_size(e.dtype), 0u) << name;
  }

  // Header length is a multiple of 8, as the format recommends.
  std::ifstream in(file, std::ios::binary);
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  EXPECT_EQ(header_len % 8, 0u);

  // Rewriting replaces the file in place.
  write_safetensors(file, {{"only", "F32", {}, &scalar, 4}});
  EXPECT_EQ(SafetensorsFile(file).names(), std::vector<std::string>{"only"});
  EXPECT_TRUE(SafetensorsFile(file).metadata().empty());
}

TEST_F(SafetensorsWriter, RejectsInconsistentEntriesWithoutWritingAFile) {
  const std::vector<float> w(6);
  const std::string file = path("bad.safetensors");
  expect_error([&] { write_safetensors(file, {{"w", "F32", {2, 4}, w.data(), 24}}); }, {"w", "24 bytes", "32"});
  expect_error([&] { write_safetensors(file, {{"w", "F32", {6}, w.data(), 24}, {"w", "F32", {6}, w.data(), 24}}); },
               {"w", "twice"});
  expect_error([&] { write_safetensors(file, {{"w", "Q4", {6}, w.data(), 24}}); }, {"unsupported dtype Q4"});
  EXPECT_FALSE(fs::exists(file));
  EXPECT_FALSE(fs::exists(file + ".tmp"));
}

TEST_F(SafetensorsBadInput, MissingFileNamesPathAndReason) {
  expect_error([&] { SafetensorsFile f(path("nope.safetensors")); },
               {path("nope.safetensors"), "No such file or directory"});
}

TEST_F(SafetensorsBadInput, TruncatedFile) {
  // Shorter than the 8-byte length field.
  {
    std::ofstream(path("tiny.safetensors"), std::ios::binary) << "abc";
  }
  expect_error([&] { SafetensorsFile f(path("tiny.safetensors")); }, {path("tiny.safetensors"), "truncated"});
  // A good file cut short in its data region.
  const std::vector<float> w(64, 1.0f);
  const std::string file = path("cut.safetensors");
  write_safetensors(file, {{"w", "F32", {64}, w.data(), 256}});
  fs::resize_file(file, fs::file_size(file) - 10);
  expect_error([&] { SafetensorsFile f(file); }, {file, "tensor w", "[0, 256]", "truncated"});
}

TEST_F(SafetensorsBadInput, HeaderLengthLargerThanFile) {
  const auto file = write_raw("h.safetensors", 1000, "{}", "");
  expect_error([&] { SafetensorsFile f(file); }, {file, "header length 1000", "10-byte file"});
  const auto huge = write_raw("huge.safetensors", 1ULL << 40, "{}", "");
  expect_error([&] { SafetensorsFile f(huge); }, {huge, "exceeds the format's limit"});
}

TEST_F(SafetensorsBadInput, HeaderNotJsonOrMissingFields) {
  const auto bad_json = write_raw("j.safetensors", R"({"w": {"dtype": "F32",)", "");
  expect_error([&] { SafetensorsFile f(bad_json); }, {bad_json, "not valid JSON"});
  const auto no_dtype = write_raw("d.safetensors", R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", "abcd");
  expect_error([&] { SafetensorsFile f(no_dtype); }, {no_dtype, "tensor w", "dtype"});
  const auto neg = write_raw("n.safetensors", R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})",
                             "abcd");
  expect_error([&] { SafetensorsFile f(neg); }, {neg, "tensor w", "non-negative"});
  const auto dtype = write_raw("u.safetensors", R"({"w": {"dtype": "F4", "shape": [8], "data_offsets": [0, 4]}})",
                               "abcd");
  expect_error([&] { SafetensorsFile f(dtype); }, {dtype, "tensor w", "unsupported dtype F4"});
}

TEST_F(SafetensorsBadInput, OffsetsOutOfRange) {
  const auto past_end =
      write_raw("o.safetensors", R"({"w": {"dtype": "F32", "shape": [16], "data_offsets": [0, 64]}})",
                std::string(16, '\0'));
  expect_error([&] { SafetensorsFile f(past_end); }, {past_end, "tensor w", "[0, 64]", "16-byte data region"});
  const auto reversed =
      write_raw("r.safetensors", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})",
                std::string(16, '\0'));
  expect_error([&] { SafetensorsFile f(reversed); }, {reversed, "tensor w", "[8, 4]"});
  const auto overlap = write_raw(
      "v.safetensors",
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
      std::string(16, '\0'));
  expect_error([&] { SafetensorsFile f(overlap); }, {overlap, "a and b overlap"});
}

TEST_F(SafetensorsBadInput, SizeShapeMismatch) {
  const auto file = write_raw("s.safetensors", R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 16]}})",
                              std::string(16, '\0'));
  expect_error([&] { SafetensorsFile f(file); }, {file, "tensor w", "16 bytes", "F32 [2, 3] needs 24"});
}

TEST_F(SafetensorsBadInput, UnsupportedDtypeForReadAsF32) {
  const std::vector<int64_t> ids = {1, 2};
  const auto file = path("i.safetensors");
  write_safetensors(file, {{"ids", "I64", {2}, ids.data(), 16}, {"mask", "BOOL", {2}, "\1\0", 2}});
  SafetensorsFile f(file);
  expect_error([&] { read_as_f32(f.entry("ids")); }, {"ids", file, "dtype I64"});
  expect_error([&] { read_as_i64(f.entry("mask")); }, {"mask", file, "dtype BOOL"});
}

TEST_F(SafetensorsBadInput, MissingTensorName) {
  const float x = 1.0f;
  const auto file = path("m.safetensors");
  write_safetensors(file, {{"x", "F32", {}, &x, 4}});
  SafetensorsFile f(file);
  EXPECT_FALSE(f.contains("model.norm.weight"));
  expect_error([&] { f.entry("model.norm.weight"); }, {"model.norm.weight", file});
  SafetensorsFolder folder(dir_.string());
  expect_error([&] { folder.entry("model.norm.weight"); }, {"model.norm.weight", dir_.string()});
}

TEST_F(SafetensorsBadInput, MissingShardNamedInIndex) {
  const float x = 1.0f;
  write_safetensors(path("model-00001-of-00002.safetensors"), {{"a", "F32", {}, &x, 4}});
  std::ofstream(path("model.safetensors.index.json"))
      << R"({"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                          "b": "model-00002-of-00002.safetensors"}})";
  expect_error([&] { SafetensorsFolder f(dir_.string()); },
               {"model-00002-of-00002.safetensors", "model.safetensors.index.json", "does not exist"});
}

TEST_F(SafetensorsBadInput, IndexPointsAtShardWithoutTheTensor) {
  const float x = 1.0f;
  write_safetensors(path("s1.safetensors"), {{"a", "F32", {}, &x, 4}});
  std::ofstream(path("model.safetensors.index.json")) << R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}})";
  expect_error([&] { SafetensorsFolder f(dir_.string()); }, {"tensor b", "s1.safetensors", "does not contain it"});
}

TEST_F(SafetensorsBadInput, FolderWithoutWeightsOrWithDuplicates) {
  expect_error([&] { SafetensorsFolder f(dir_.string()); }, {dir_.string(), "no *.safetensors"});
  expect_error([&] { SafetensorsFolder f(path("absent")); }, {path("absent"), "does not exist"});
  const float x = 1.0f;
  write_safetensors(path("a.safetensors"), {{"w", "F32", {}, &x, 4}});
  write_safetensors(path("b.safetensors"), {{"w", "F32", {}, &x, 4}});
  expect_error([&] { SafetensorsFolder f(dir_.string()); }, {"tensor w", "a.safetensors", "b.safetensors"});
}

}  // namespace
}  // namespace fsdp::ckpt
