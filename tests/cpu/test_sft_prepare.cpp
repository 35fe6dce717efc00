// prepare of supervised fine-tuning data: every dataset format's ids and loss mask against
// tests/golden/sft/expected.json (transformers' apply_chat_template with its assistant mask,
// or the char-span reference of generate_sft.py); the mask sidecar's manifest entry and CRC;
// truncation and dropping counted; bad inputs refused naming the file and line with nothing
// written; the loader turning masked tokens into ignored targets, packed or one row each.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "fsdp/cli/commands.h"
#include "fsdp/data/indexed_dataset.h"
#include "fsdp/data/loader.h"
#include "fsdp/data/loss_mask.h"
#include "fsdp/data/prepare.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace fsdp {
namespace {

fs::path scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("fsdp_sft_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::string golden(const std::string& rel) { return test::source_path("tests/golden/" + rel); }

// A model folder for `model` (under tests/golden/): sft/llama3_generation borrows
// llama3_chat's tokenizer.json, as generate_sft.py does.
std::string model_dir(const std::string& model, const fs::path& tmp) {
  if (fs::exists(golden(model) + "/tokenizer.json")) return golden(model);
  const fs::path dir = tmp / fs::path(model).filename();
  fs::create_directories(dir);
  fs::copy_file(golden("tokenizers/llama3_chat/tokenizer.json"), dir / "tokenizer.json", fs::copy_options::overwrite_existing);
  fs::copy_file(golden(model) + "/tokenizer_config.json", dir / "tokenizer_config.json", fs::copy_options::overwrite_existing);
  return dir.string();
}

data::PrepareOptions sft_options(const std::string& model, const std::vector<std::string>& inputs, const fs::path& out) {
  data::PrepareOptions o;
  o.tokenizer = model;
  o.inputs = inputs;
  o.output = out.string();
  o.workers = 2;
  o.quiet = true;
  return o;
}

// Every document of a prepared split's first shard, with its mask.
std::vector<std::pair<std::vector<int32_t>, std::vector<uint8_t>>> read_back(const fs::path& dir) {
  const data::IndexedDataset shard((dir / "train_00000").string());
  const data::LossMask mask((dir / "train_00000").string(), shard.num_tokens());
  std::vector<std::pair<std::vector<int32_t>, std::vector<uint8_t>>> out;
  int64_t at = 0;
  for (int64_t d = 0; d < shard.num_documents(); ++d) {
    const int64_t n = shard.document_size(d);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    std::vector<uint8_t> m(static_cast<size_t>(n));
    shard.read(d, 0, n, ids.data());
    mask.read(at, n, m.data());
    at += n;
    out.emplace_back(std::move(ids), std::move(m));
  }
  return out;
}

TEST(SftPrepare, EveryFormatMatchesTransformers) {
  const nlohmann::json expected = nlohmann::json::parse(std::ifstream(golden("sft/expected.json")));
  const fs::path tmp = scratch("golden");
  int case_no = 0;
  for (const nlohmann::json& c : expected["cases"]) {
    const std::string what = c["input"].get<std::string>() + " with " + c["model"].get<std::string>() + " " +
                             c["flags"].dump();
    data::PrepareOptions o = sft_options(model_dir(c["model"], tmp), {golden("sft/" + c["input"].get<std::string>())},
                                         tmp / ("out" + std::to_string(case_no++)));
    const std::vector<std::string> flags = c["flags"];
    for (size_t i = 0; i < flags.size(); ++i) {
      if (flags[i] == "--sharegpt") o.sft.sharegpt = true;
      if (flags[i] == "--template") o.sft.template_name = flags[++i];
      if (flags[i] == "--train-on") {
        const std::string v = flags[++i];
        o.sft.train_on = v == "last" ? data::TrainOn::kLast : v == "all" ? data::TrainOn::kAll : data::TrainOn::kAssistant;
      }
    }
    const data::PrepareResult r = data::prepare_corpus(o);
    ASSERT_TRUE(r.sft) << what;
    const auto docs = read_back(o.output);
    ASSERT_EQ(docs.size(), c["examples"].size()) << what;
    int64_t trained = 0;
    for (size_t i = 0; i < docs.size(); ++i) {
      const nlohmann::json& e = c["examples"][i];
      EXPECT_EQ(docs[i].first, e["ids"].get<std::vector<int32_t>>()) << what << " line " << e["line"];
      EXPECT_EQ(docs[i].second, e["mask"].get<std::vector<uint8_t>>()) << what << " line " << e["line"];
      for (const int m : e["mask"]) trained += m;
    }
    EXPECT_EQ(r.train.trained_tokens, trained) << what;
  }
}

TEST(SftPrepare, ManifestCountsExamplesTrainedTokensAndCutOnes) {
  const fs::path tmp = scratch("manifest");
  data::PrepareOptions o = sft_options(golden("tokenizers/llama3_chat"),
                                       {golden("sft/messages.jsonl"), golden("sft/prompt.jsonl")}, tmp / "out");
  o.sft.max_seq_len = 45;  // messages.jsonl's lines are 43, 47 and 61 tokens long; prompt.jsonl's under 30
  const data::PrepareResult cut = data::prepare_corpus(o);
  EXPECT_EQ(cut.truncated, 2);
  EXPECT_EQ(cut.dropped, 0);
  EXPECT_EQ(cut.train.documents, 5);
  const nlohmann::json m = nlohmann::json::parse(std::ifstream(tmp / "out" / "manifest.json"));
  EXPECT_EQ(m["sft"]["examples"]["messages"], 3);
  EXPECT_EQ(m["sft"]["examples"]["prompt"], 2);
  EXPECT_EQ(m["sft"]["truncated_examples"], 2);
  EXPECT_EQ(m["splits"]["train"]["trained_tokens"], cut.train.trained_tokens);
  const nlohmann::json& sum = m["shard_checksums"]["train_00000"];
  EXPECT_EQ(sum["mask_bytes"], data::kLossMaskHeaderBytes + cut.train.tokens);
  EXPECT_TRUE(sum.contains("mask_crc32"));
  o.sft.drop_overlong = true;
  o.overwrite = true;
  const data::PrepareResult dropped = data::prepare_corpus(o);
  EXPECT_EQ(dropped.dropped, 2);
  EXPECT_EQ(dropped.train.documents, 3);
  // Pretraining text keeps its old output: no masks, no sft entry.
  const fs::path text = tmp / "plain.txt";
  std::ofstream(text) << "one paragraph of text\n\nand another one\n";
  data::PrepareOptions p = sft_options(golden("tokenizers/llama3_style"), {text.string()}, tmp / "plain");
  EXPECT_FALSE(data::prepare_corpus(p).sft);
  EXPECT_FALSE(fs::exists(tmp / "plain" / "train_00000.mask"));
  EXPECT_TRUE(nlohmann::json::parse(std::ifstream(tmp / "plain" / "manifest.json"))["sft"].is_null());
}

TEST(SftPrepare, BadExamplesAreRefusedByFileAndLineLeavingTheOutputAlone) {
  const fs::path tmp = scratch("bad");
  const fs::path out = tmp / "out";
  fs::create_directories(out);
  std::ofstream(out / "keep.txt") << "an earlier output";
  const std::string good = R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{not json", ":2: not a JSON object"},
      {R"({"messages": [{"role": "robot", "content": "x"}]})", ":2: messages[0] has an unknown role \"robot\""},
      {R"({"messages": [{"role": "user"}]})", ":2: messages[0] has no \"content\""},
      {R"({"prompt": "p"})", ":2: has no \"completion\""},
      {R"({"instruction": "i"})", ":2: has no \"output\""},
      {R"({"conversations": [{"from": "human", "value": "x"}]})", ":2: a ShareGPT \"conversations\" line: pass --sharegpt"},
      {R"({"messages": [{"role": "user", "content": "only a question"}]})", ":2: \"messages\" has no assistant turn"},
      {R"({"input_ids": [1, 2], "labels": [-100]})", ":2: \"labels\" has 1 entries, \"input_ids\" 2"},
      {R"({"input_ids": [1, 2], "labels": [-100, 3]})", ":2: labels[1] = 3 is neither -100 nor input_ids[1] = 2"},
  };
  for (const auto& [line, want] : cases) {
    const fs::path in = tmp / "bad.jsonl";
    std::ofstream(in) << good << "\n" << line << "\n";
    data::PrepareOptions o = sft_options(golden("tokenizers/llama3_chat"), {in.string()}, out);
    o.overwrite = true;
    EXPECT_ERROR_MENTIONS(data::prepare_corpus(o), in.string() + want);
    EXPECT_TRUE(fs::exists(out / "keep.txt")) << line;
  }
  // The CLI: exit 1 for bad data, 2 for bad flags.
  auto run = [](std::vector<std::string> args) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    return cli::prepare_command(int(argv.size()), argv.data());
  };
  const std::string model = golden("tokenizers/llama3_chat");
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  std::vector<int> codes;
  codes.push_back(run({"prepare", "--tokenizer", model, "--output", (tmp / "cli").string(), "--train-on", "prompts",
                 golden("sft/messages.jsonl")}));
  codes.push_back(run({"prepare", "--tokenizer", model, "--output", (tmp / "cli").string(), "--overlong", "keep",
                       golden("sft/messages.jsonl")}));
  codes.push_back(run({"prepare", "--tokenizer", model, "--output", out.string(), "--overwrite",
                       (tmp / "bad.jsonl").string()}));
  codes.push_back(run({"prepare", "--tokenizer", model, "--output", (tmp / "cli").string(), "--val-fraction", "0",
                       "--train-on", "last", "--max-seq-len", "50", "--overlong", "drop", golden("sft/messages.jsonl")}));
  const std::string out_text = testing::internal::GetCapturedStdout(), err_text = testing::internal::GetCapturedStderr();
  EXPECT_EQ(codes, (std::vector<int>{2, 2, 1, 0})) << out_text << err_text;
  EXPECT_NE(err_text.find("bad.jsonl:2:"), std::string::npos) << err_text;
  EXPECT_TRUE(fs::exists(out / "keep.txt"));
  // A template that does not render turns as prefixes of each other is refused naming the line.
  const fs::path odd = tmp / "odd_template";
  fs::create_directories(odd);
  fs::copy_file(golden("tokenizers/llama3_chat/tokenizer.json"), odd / "tokenizer.json");
  // Writes the number of messages first: a shorter conversation renders a different start.
  std::ofstream(odd / "tokenizer_config.json") << R"({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
    "chat_template": "{{ messages | length }}{% for m in messages %}{{ m['content'] }}<|eot_id|>{% endfor %}"})";
  data::PrepareOptions o = sft_options(odd.string(), {golden("sft/messages.jsonl")}, tmp / "odd_out");
  EXPECT_ERROR_MENTIONS(data::prepare_corpus(o), golden("sft/messages.jsonl") + ":1: the chat template");
  EXPECT_FALSE(fs::exists(tmp / "odd_out"));
}

// Tokens 0..n-1 in documents of `sizes`, the second half of each document trained.
fs::path masked_corpus(const std::string& name, const std::vector<int64_t>& sizes) {
  const fs::path dir = scratch(name);
  data::IndexedDatasetWriter w((dir / "train_00000").string(), 1024);
  data::LossMaskWriter m((dir / "train_00000").string());
  int32_t next = 0;
  for (const int64_t n : sizes) {
    std::vector<int32_t> ids;
    std::vector<uint8_t> mask;
    for (int64_t i = 0; i < n; ++i) {
      ids.push_back(next++);
      mask.push_back(i >= n / 2 ? 1 : 0);
    }
    w.add_document(ids.data(), n);
    m.add(mask.data(), n);
  }
  w.finish();
  m.finish();
  const data::ShardChecksum& c = w.checksum();
  nlohmann::json manifest = {{"format", "megatron-mmap-v1"},
                             {"shard_checksums",
                              {{"train_00000",
                                {{"bin_bytes", c.bin_bytes}, {"bin_crc32", c.bin_crc32}, {"idx_bytes", c.idx_bytes},
                                 {"idx_crc32", c.idx_crc32}, {"mask_bytes", m.file_bytes()}, {"mask_crc32", m.file_crc32()}}}}}};
  std::ofstream(dir / "manifest.json") << manifest.dump();
  return dir;
}

TEST(SftLoader, MaskedTokensBecomeIgnoredTargetsPackedOrOnePerRow) {
  const fs::path dir = masked_corpus("loader", {6, 4, 10});
  const int64_t seq = 8;
  data::LoaderOptions lo;
  lo.seq_len = seq;
  lo.shuffle = false;
  lo.num_workers = 0;
  const Tensor ids = Tensor::empty({seq}, DType::I32), targets = Tensor::empty({seq}, DType::I32);
  // Packed: window 0 is tokens 0..8 (doc 0: 0-5, trained 3-5; doc 1: 6-9, trained 8-9).
  data::Loader packed(data::open_token_corpus(dir.string(), "train", seq, 1024), lo);
  ASSERT_TRUE(packed.masked());
  packed.next(ids, targets);
  const std::vector<int32_t> want = {-100, -100, 3, 4, 5, -100, -100, 8};
  for (int64_t t = 0; t < seq; ++t) EXPECT_EQ(targets.data<int32_t>()[t], want[size_t(t)]) << "target " << t;
  // One row per example: doc 1 (ids 6..9) padded with 0, its pads and prompt ignored; doc 2 cut at 9 tokens.
  auto rows_source = data::open_example_rows(dir.string(), "train", seq, 1024);
  EXPECT_EQ(rows_source->num_samples(), 3);
  data::Loader rows(std::move(rows_source), lo);
  rows.next(ids, targets);
  rows.next(ids, targets);
  const std::vector<int32_t> row_ids = {6, 7, 8, 9, 0, 0, 0, 0}, row_targets = {-100, 8, 9, -100, -100, -100, -100, -100};
  for (int64_t t = 0; t < seq; ++t) {
    EXPECT_EQ(ids.data<int32_t>()[t], row_ids[size_t(t)]) << "id " << t;
    EXPECT_EQ(targets.data<int32_t>()[t], row_targets[size_t(t)]) << "target " << t;
  }
  rows.next(ids, targets);
  EXPECT_EQ(targets.data<int32_t>()[seq - 1], 18);  // doc 2 is 10..19: its 9th token, trained
}

TEST(SftLoader, AChangedOrMissingMaskIsRefusedByName) {
  const fs::path dir = masked_corpus("crc", {6, 4, 10});
  const std::string mask = (dir / "train_00000.mask").string();
  {
    std::fstream f(mask, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(data::kLossMaskHeaderBytes + 2);
    f.put(char(1));  // a prompt token flipped to trained: a valid mask byte, a wrong file
  }
  EXPECT_ERROR_MENTIONS(data::open_token_corpus(dir.string(), "train", 8, 1024),
                        "loss mask file " + mask + ": CRC-32");
  fs::remove(mask);
  EXPECT_ERROR_MENTIONS(data::open_token_corpus(dir.string(), "train", 8, 1024), mask + " is missing");
}

}  // namespace
}  // namespace fsdp
