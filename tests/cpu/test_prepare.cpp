// prepare: text / JSONL (plain, .gz, .zst, pre-tokenized) -> Megatron shards + manifest.
// The sentencepiece model is trained in SetUpTestSuite (unigram, vocab 64 (the word list allows no more), on the test's
// own text, a second or so), so no binary model is committed. The text uses single spaces
// and lower-case ASCII words only: sentencepiece's decode then gives it back exactly.
#include <fcntl.h>
#include <sentencepiece_trainer.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "fsdp/cli/commands.h"
#include "fsdp/core/error.h"
#include "fsdp/data/indexed_dataset.h"
#include "fsdp/data/loader.h"
#include "fsdp/data/prepare.h"
#include "fsdp/data/shard_manifest.h"
#include "fsdp/data/text_inputs.h"
#include "fsdp/data/tokenizer.h"
#include "test_util.h"

namespace fs = std::filesystem;
using fsdp::data::PrepareOptions;
using fsdp::data::PrepareResult;
using fsdp::data::Tokenizer;

namespace {

std::vector<std::string> make_paragraphs(int n, uint64_t seed) {
  static const char* words[] = {"the", "model", "learns", "tokens", "from", "text", "and", "data", "shards",
                                "train", "fast", "on", "many", "cores", "with", "a", "small", "vocab",
                                "every", "paragraph", "is", "one", "document", "here", "we", "go"};
  std::mt19937_64 rng(seed);
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    std::string p;
    const int len = 3 + int(rng() % 25);
    for (int w = 0; w < len; ++w) p += std::string(w ? " " : "") + words[rng() % std::size(words)];
    out.push_back(p);
  }
  return out;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out << s;
}

void write_gz(const fs::path& p, const std::string& s) {
  gzFile f = gzopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, s.data(), unsigned(s.size())), int(s.size()));
  gzclose(f);
}

std::string zstd_bytes(const std::string& s) {
  std::string out(ZSTD_compressBound(s.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), s.data(), s.size(), 3);
  out.resize(n);
  return out;
}

std::string txt_of(const std::vector<std::string>& paras) {
  std::string s;
  for (size_t i = 0; i < paras.size(); ++i) {
    s += paras[i] + "\n";
    s += (i % 3 == 0) ? "\n" : (i % 3 == 1) ? "\n \n\n" : "\t\n";  // one or more blank lines
  }
  return s;
}

std::string jsonl_of(const std::vector<std::string>& paras) {
  std::string s;
  for (const auto& p : paras) s += nlohmann::json{{"text", p}, {"id", s.size()}}.dump() + "\n";
  return s;
}

// Every document of every shard of a split, in order.
std::vector<std::vector<int32_t>> read_split(const fs::path& dir, const std::string& split) {
  const auto m = nlohmann::json::parse(read_bytes(dir / "manifest.json"));
  std::vector<std::vector<int32_t>> docs;
  for (const auto& shard : m["splits"][split]["shards"]) {
    fsdp::data::IndexedDataset ds((dir / shard.get<std::string>()).string());
    for (int64_t d = 0; d < ds.num_documents(); ++d) {
      std::vector<int32_t> t(size_t(ds.document_size(d)));
      ds.read(d, 0, int64_t(t.size()), t.data());
      docs.push_back(std::move(t));
    }
  }
  return docs;
}

class Prepare : public ::testing::Test {
 protected:
  static inline fs::path root;
  static inline std::string model;
  static inline std::vector<std::string> paras;

  static void SetUpTestSuite() {
    root = fs::temp_directory_path() / ("fsdp_prepare_test_" + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::create_directories(root);
    paras = make_paragraphs(400, 1);
    write_bytes(root / "spm_train.txt", txt_of(make_paragraphs(2000, 99)));
    const auto status = sentencepiece::SentencePieceTrainer::Train(
        "--input=" + (root / "spm_train.txt").string() + " --model_prefix=" + (root / "spm").string() +
        " --vocab_size=64 --model_type=unigram --character_coverage=1.0 --minloglevel=2");
    ASSERT_TRUE(status.ok()) << status.ToString();
    model = (root / "spm.model").string();
  }
  static void TearDownTestSuite() { fs::remove_all(root); }

  PrepareOptions options(const std::string& out, std::vector<std::string> inputs) {
    PrepareOptions o;
    o.tokenizer = model;
    o.output = (root / out).string();
    o.inputs = std::move(inputs);
    o.quiet = true;
    return o;
  }
  std::string file(const std::string& name) { return (root / name).string(); }

  // Runs prepare expecting an fsdp::Error mentioning `parts`, and no output or temporary
  // directory left behind.
  void expect_failure(PrepareOptions o, std::initializer_list<std::string> parts) {
    fsdp::test::expect_error([&] { fsdp::data::prepare_corpus(o); }, parts, "prepare_corpus");
    EXPECT_FALSE(fs::exists(o.output)) << o.output;
    for (const auto& e : fs::directory_iterator(root)) {
      EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
    }
  }
};

TEST_F(Prepare, TokenizerBasics) {
  const Tokenizer tok(model);
  EXPECT_EQ(tok.vocab_size(), 64);
  EXPECT_EQ(tok.bos_id(), 1);  // sentencepiece's defaults: unk 0, bos 1, eos 2
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.decode(tok.encode(paras[0])), paras[0]);
  const std::string bytes = read_bytes(model);
  EXPECT_EQ(tok.content_hash(), fsdp::data::fnv1a64(bytes.data(), bytes.size()));
  EXPECT_EQ(tok.content_hash_hex().size(), 16u);
  EXPECT_ERROR_MENTIONS(Tokenizer(file("nope.model")), "nope.model");
}

TEST_F(Prepare, TextRoundTrip) {
  write_bytes(root / "rt.txt", txt_of(paras));
  PrepareOptions o = options("rt_out", {file("rt.txt")});
  const PrepareResult r = fsdp::data::prepare_corpus(o);
  EXPECT_EQ(r.train.documents, int64_t(paras.size()));
  EXPECT_EQ(r.val.documents, 0);
  const Tokenizer tok(model);
  const auto docs = read_split(o.output, "train");
  ASSERT_EQ(docs.size(), paras.size());
  for (size_t i = 0; i < docs.size(); ++i) {
    ASSERT_GE(docs[i].size(), 2u);
    EXPECT_EQ(docs[i].front(), tok.bos_id());
    EXPECT_EQ(docs[i].back(), tok.eos_id());
    EXPECT_EQ(tok.decode(std::span(docs[i]).subspan(1, docs[i].size() - 2)), paras[i]) << "document " << i;
  }
  const auto m = nlohmann::json::parse(read_bytes(fs::path(o.output) / "manifest.json"));
  EXPECT_EQ(m["format"], "megatron-mmap-v1");
  EXPECT_EQ(m["vocab_size"], 64);
  EXPECT_EQ(m["bos_id"], 1);
  EXPECT_EQ(m["eos_id"], 2);
  EXPECT_EQ(m["tokenizer"]["fnv1a64"], tok.content_hash_hex());
  EXPECT_EQ(m["splits"]["train"]["documents"], int64_t(paras.size()));
  EXPECT_EQ(m["splits"]["train"]["shards"], nlohmann::json::array({"train_00000"}));
  EXPECT_EQ(m["inputs"][0]["path"], file("rt.txt"));
  EXPECT_EQ(m["bad_lines"], 0);
  // An existing non-empty output is never overwritten unless asked.
  fsdp::test::expect_error([&] { fsdp::data::prepare_corpus(o); }, {"not empty", "--overwrite"});
  EXPECT_TRUE(fs::exists(fs::path(o.output) / "manifest.json"));
  o.overwrite = true;
  EXPECT_EQ(fsdp::data::prepare_corpus(o).train.documents, int64_t(paras.size()));
}

TEST_F(Prepare, FormatsGiveSameTokens) {
  const std::string txt = txt_of(paras), jsonl = jsonl_of(paras);
  write_bytes(root / "f.txt", txt);
  write_gz(root / "f.txt.gz", txt);
  write_bytes(root / "f.jsonl", jsonl);
  write_gz(root / "f.jsonl.gz", jsonl);
  write_bytes(root / "f.jsonl.zst", zstd_bytes(jsonl));
  write_bytes(root / "f.txt.zst", zstd_bytes(txt));
  fsdp::data::prepare_corpus(options("f_ref", {file("f.txt")}));
  const auto ref = read_split(root / "f_ref", "train");
  ASSERT_EQ(ref.size(), paras.size());
  for (const char* name : {"f.txt.gz", "f.jsonl", "f.jsonl.gz", "f.jsonl.zst", "f.txt.zst"}) {
    const std::string out = std::string("f_out_") + name;
    fsdp::data::prepare_corpus(options(out, {file(name)}));
    EXPECT_EQ(read_split(root / out, "train"), ref) << name;
  }
  // Several inputs: documents in input order.
  fsdp::data::prepare_corpus(options("f_two", {file("f.jsonl.zst"), file("f.txt.gz")}));
  auto two = ref;
  two.insert(two.end(), ref.begin(), ref.end());
  EXPECT_EQ(read_split(root / "f_two", "train"), two);
}

TEST_F(Prepare, TextFieldFlag) {
  std::string s;
  for (const auto& p : paras) s += nlohmann::json{{"content", p}}.dump() + "\n";
  write_bytes(root / "tf.jsonl", s);
  PrepareOptions o = options("tf_out", {file("tf.jsonl")});
  expect_failure(o, {"tf.jsonl:1", "no 'text' field", "content", "--text-field"});
  o.text_field = "content";
  EXPECT_EQ(fsdp::data::prepare_corpus(o).train.documents, int64_t(paras.size()));
}

TEST_F(Prepare, InputIdsTakenAsIs) {
  std::vector<std::vector<int32_t>> ids = {{5, 6, 7}, {63, 0, 3, 9}, {42}};
  std::string s;
  for (const auto& v : ids) s += nlohmann::json{{"input_ids", v}}.dump() + "\n";
  write_bytes(root / "ids.jsonl", s);
  write_bytes(root / "ids.jsonl.zst", zstd_bytes(s));
  fsdp::data::prepare_corpus(options("ids_out", {file("ids.jsonl"), file("ids.jsonl.zst")}));
  auto want = ids;
  want.insert(want.end(), ids.begin(), ids.end());
  EXPECT_EQ(read_split(root / "ids_out", "train"), want);

  write_bytes(root / "ids_bad.jsonl", s + "{\"input_ids\": [1, 64]}\n");
  expect_failure(options("ids_bad_out", {file("ids_bad.jsonl")}), {"ids_bad.jsonl:4", "64", "vocabulary"});
}

TEST_F(Prepare, ValSplitDeterministic) {
  const auto many = make_paragraphs(2000, 5);
  write_bytes(root / "val.jsonl", jsonl_of(many));
  PrepareOptions o = options("val_a", {file("val.jsonl")});
  o.val_fraction = 0.1;
  const PrepareResult a = fsdp::data::prepare_corpus(o);
  EXPECT_EQ(a.train.documents + a.val.documents, 2000);
  EXPECT_GT(a.val.documents, 150);  // binomial(2000, 0.1): mean 200, sd 13
  EXPECT_LT(a.val.documents, 250);
  o.output = file("val_b");
  o.workers = 3;
  const PrepareResult b = fsdp::data::prepare_corpus(o);
  EXPECT_EQ(read_split(root / "val_a", "val"), read_split(root / "val_b", "val"));
  EXPECT_EQ(read_split(root / "val_a", "train"), read_split(root / "val_b", "train"));
  EXPECT_EQ(a.val.tokens, b.val.tokens);
}

TEST_F(Prepare, SameBytesWhateverTheWorkers) {
  const auto many = make_paragraphs(3000, 7);
  write_bytes(root / "w.jsonl", jsonl_of(many));
  write_gz(root / "w.txt.gz", txt_of(paras));
  for (int workers : {1, 4}) {
    PrepareOptions o = options("w_" + std::to_string(workers), {file("w.jsonl"), file("w.txt.gz")});
    o.workers = workers;
    o.val_fraction = 0.05;
    o.shard_tokens = 20000;  // several shards per split
    fsdp::data::prepare_corpus(o);
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root / "w_1")) names.push_back(e.path().filename().string());
  EXPECT_GT(names.size(), 6u);  // train_00000.. several, val, manifest
  for (const auto& n : names) {
    EXPECT_EQ(read_bytes(root / "w_1" / n), read_bytes(root / "w_4" / n)) << n;
  }
  EXPECT_TRUE(fs::exists(root / "w_4" / "train_00001.bin"));
}

TEST_F(Prepare, MalformedLinesCountedAgainstTheLimit) {
  std::string s = jsonl_of(paras);
  s += "{\"text\": \"the model\"\n";  // line 401: unterminated object
  write_bytes(root / "bad.jsonl", s);
  // 1 bad of 401 lines > 0.001: fails, naming file:line.
  expect_failure(options("bad_out", {file("bad.jsonl")}), {"1 of 401", "bad.jsonl:401", "--max-bad-fraction"});
  PrepareOptions o = options("bad_ok", {file("bad.jsonl")});
  o.max_bad_fraction = 0.01;
  const PrepareResult r = fsdp::data::prepare_corpus(o);
  EXPECT_EQ(r.bad_lines, 1);
  EXPECT_EQ(r.train.documents, int64_t(paras.size()));
  ASSERT_EQ(r.bad_examples.size(), 1u);
  EXPECT_NE(r.bad_examples[0].find("bad.jsonl:401"), std::string::npos) << r.bad_examples[0];
}

// A line longer than --max-line-bytes is a bad line, dropped as it streams by: a single-line
// JSON file of hundreds of MB once grew prepare to 15 GB and never finished.
TEST_F(Prepare, OverLongLinesAreBadLinesNotReadWhole) {
  std::string s = jsonl_of(paras);
  s += "{\"text\": \"" + std::string(3 << 20, 'a') + "\"}\n";  // line 401: 3 MiB
  s += jsonl_of({"after the long line"});
  write_bytes(root / "long.jsonl", s);
  write_bytes(root / "long.txt", txt_of(paras) + std::string(3 << 20, 'b') + "\n\nafter the long line\n");
  for (const char* input : {"long.jsonl", "long.txt"}) {
    PrepareOptions o = options(std::string("long_out_") + input, {file(input)});
    o.max_line_bytes = 1 << 20;
    o.max_bad_fraction = 0.01;
    const PrepareResult r = fsdp::data::prepare_corpus(o);
    EXPECT_EQ(r.bad_lines, 1) << input;
    EXPECT_EQ(r.train.documents, int64_t(paras.size()) + 1) << input;  // the line after it is read
    ASSERT_EQ(r.bad_examples.size(), 1u) << input;
    EXPECT_NE(r.bad_examples[0].find(std::string(input) + ":"), std::string::npos) << r.bad_examples[0];
    EXPECT_NE(r.bad_examples[0].find("line longer than --max-line-bytes 1048576: skipped"), std::string::npos)
        << r.bad_examples[0];
  }
  // Beyond --max-bad-fraction (1 of 402 > 0.001), the run fails naming it.
  PrepareOptions o = options("long_fails", {file("long.jsonl")});
  o.max_line_bytes = 1 << 20;
  expect_failure(o, {"1 of 402 lines are malformed, too long or not UTF-8", "long.jsonl:401"});
}

// `fsdp_train prepare ARGS...` as a child process, output discarded, with the terminal's
// signals at their defaults (whatever this process does with them).
pid_t spawn_prepare(std::vector<std::string> args) {
  args.insert(args.begin(), {FSDP_TRAIN_BIN, "prepare"});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    for (const int s : {SIGINT, SIGTERM, SIGHUP}) signal(s, SIG_DFL);
    const int devnull = ::open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    dup2(devnull, 2);
    execv(FSDP_TRAIN_BIN, argv.data());
    _exit(127);
  }
  return pid;
}

// The child's exit code and its peak resident set in MiB.
std::pair<int, double> wait_for(pid_t pid) {
  int status = 0;
  rusage ru{};
  if (wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status)) return {-1, 0.0};
  return {WEXITSTATUS(status), double(ru.ru_maxrss) / 1024};
}

// The memory bound, measured: a 160 MiB single line under --max-line-bytes 1 MiB costs the
// process no more than a one-line input does (its floor is the libraries it maps, ~220 MiB
// in a CUDA build); under the default 64 MiB limit it costs about that limit.
TEST_F(Prepare, AnOverLongLineDoesNotGrowTheProcess) {
  {
    std::ofstream out(root / "huge.jsonl", std::ios::binary);
    out << jsonl_of(paras) << "{\"text\": \"";
    const std::string mib(1 << 20, 'x');
    for (int i = 0; i < 160; ++i) out << mib;
    out << "\"}\n";
  }
  write_bytes(root / "small.jsonl", jsonl_of(paras));
  const auto [small_rc, floor] = wait_for(spawn_prepare({"--tokenizer", model, "--output", file("small_out"), file("small.jsonl")}));
  ASSERT_EQ(small_rc, 0);
  const auto [huge_rc, peak] = wait_for(spawn_prepare({"--tokenizer", model, "--output", file("huge_out"),
                                                       "--max-line-bytes", "1048576", "--max-bad-fraction", "0.01",
                                                       file("huge.jsonl")}));
  ASSERT_EQ(huge_rc, 0);
  EXPECT_LT(peak - floor, 16.0) << "peak RSS " << peak << " MiB for a 160 MiB line, " << floor << " for a small input";
  const auto m = nlohmann::json::parse(read_bytes(root / "huge_out" / "manifest.json"));
  EXPECT_EQ(m["bad_lines"].get<int>(), 1);
  fs::remove(root / "huge.jsonl");
}

// Ctrl-C, SIGTERM and SIGHUP stop prepare between batches and remove DIR.tmp-<pid>: nothing
// of the run is left, and the exit code says which signal (128 + its number).
TEST_F(Prepare, AnInterruptedRunLeavesNothingBehind) {
  {
    std::ofstream out(root / "big.txt");
    const std::string text = txt_of(make_paragraphs(2000, 3));
    for (int i = 0; i < 200; ++i) out << text;  // tens of MB: seconds of tokenizing on one worker
  }
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    const std::string out = file("interrupted_" + std::to_string(sig));
    const pid_t pid = spawn_prepare({"--tokenizer", model, "--output", out, "--workers", "1", file("big.txt")});
    ASSERT_GT(pid, 0);
    const std::string tmp = out + ".tmp-" + std::to_string(pid);
    for (int i = 0; i < 200 && !fs::exists(tmp + "/train_00000.bin.tmp"); ++i) usleep(50000);
    ASSERT_TRUE(fs::exists(tmp)) << "prepare did not start writing";
    kill(pid, sig);
    EXPECT_EQ(wait_for(pid).first, 128 + sig) << "signal " << sig << ": killed without cleaning up, or finished";
    EXPECT_FALSE(fs::exists(tmp)) << tmp;
    EXPECT_FALSE(fs::exists(out)) << out;
  }
  fs::remove(root / "big.txt");
}

// manifest.json records each shard's sizes and CRC-32s (zlib's, over the files' bytes),
// which the loader verifies (Note [Shard verification]).
TEST_F(Prepare, TheManifestRecordsEveryShardsChecksums) {
  write_bytes(root / "sums.txt", txt_of(paras));
  PrepareOptions o = options("sums_out", {file("sums.txt")});
  o.val_fraction = 0.2;
  o.shard_tokens = 2000;  // several shards per split
  fsdp::data::prepare_corpus(o);
  const auto m = nlohmann::json::parse(read_bytes(root / "sums_out" / "manifest.json"));
  int shards = 0;
  for (const char* split : {"train", "val"}) {
    for (const auto& shard : m["splits"][split]["shards"]) {
      const std::string name = shard.get<std::string>();
      const auto& sum = m["shard_checksums"][name];
      for (const char* ext : {"bin", "idx"}) {
        const std::string bytes = read_bytes(root / "sums_out" / (name + "." + ext));
        EXPECT_EQ(sum[std::string(ext) + "_bytes"].get<int64_t>(), int64_t(bytes.size())) << name << ext;
        EXPECT_EQ(sum[std::string(ext) + "_crc32"].get<uint32_t>(),
                  uint32_t(crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), uInt(bytes.size()))))
            << name << ext;
      }
      ++shards;
    }
  }
  EXPECT_GE(shards, 3);
}

// Tokens from another tokenizer (Llama 3's 128256-id vocabulary here, as SageMaker model
// parallel's json.gz shards hold them): --vocab-size instead of a sentencepiece model. Ids
// past 65535 make int32 shards; every id is checked against the vocabulary; the manifest
// records the vocabulary and no tokenizer; text has nothing to tokenize it and is refused.
TEST_F(Prepare, PreTokenizedInputsNeedOnlyAVocabularySize) {
  const std::vector<std::vector<int32_t>> ids = {{128000, 9906, 1917, 128001}, {128255, 0, 70000}, {42}};
  std::string s;
  for (const auto& v : ids) s += nlohmann::json{{"input_ids", v}, {"attention_mask", std::vector<int>(v.size(), 1)}}.dump() + "\n";
  write_gz(root / "ids3.json.gz", s);  // SMP's naming: JSON Lines in a .json.gz
  PrepareOptions o = options("ids3_out", {file("ids3.json.gz")});
  o.tokenizer.clear();
  o.vocab_size = 128256;
  fsdp::data::prepare_corpus(o);
  EXPECT_EQ(read_split(root / "ids3_out", "train"), ids);
  const auto m = nlohmann::json::parse(read_bytes(root / "ids3_out" / "manifest.json"));
  EXPECT_EQ(m["vocab_size"], 128256);
  EXPECT_TRUE(m["tokenizer"].is_null());
  EXPECT_EQ(m["dtype"], "int32");
  EXPECT_EQ(fsdp::data::read_shard_manifest((root / "ids3_out").string())->vocab_size, 128256);

  write_bytes(root / "ids3_bad.jsonl", s + "{\"input_ids\": [5, 128256]}\n");
  o = options("x", {file("ids3_bad.jsonl")});
  o.tokenizer.clear();
  o.vocab_size = 128256;
  expect_failure(o, {"ids3_bad.jsonl:4", "128256", "vocabulary [0, 128256)"});
  write_bytes(root / "ids3_text.jsonl", s + "{\"text\": \"words, not ids\"}\n");
  o.inputs = {file("ids3_text.jsonl")};
  expect_failure(o, {"ids3_text.jsonl:4", "no 'input_ids'", "--vocab-size"});
  write_bytes(root / "ids3.txt", "a paragraph\n");
  o.inputs = {file("ids3.txt")};
  expect_failure(o, {"ids3.txt", "needs a tokenizer"});
  o.inputs = {file("ids3_bad.jsonl")};
  o.tokenizer = model;
  expect_failure(o, {"--tokenizer and --vocab-size exclude each other"});
  o.tokenizer.clear();
  o.vocab_size = 0;
  expect_failure(o, {"--tokenizer", "--vocab-size"});
}

TEST_F(Prepare, BadInputsFailCleanly) {
  const std::string jsonl = jsonl_of(paras);
  expect_failure(options("x", {file("missing.jsonl")}), {"missing.jsonl", "does not exist"});
  write_bytes(root / "empty.txt", "\n\n  \n");
  expect_failure(options("x", {file("empty.txt")}), {"empty.txt", "no documents"});
  write_bytes(root / "empty.jsonl.gz", "");
  expect_failure(options("x", {file("empty.jsonl.gz")}), {"empty.jsonl.gz"});
  write_bytes(root / "notes.md", "hello\n");
  expect_failure(options("x", {file("notes.md")}), {"notes.md", "unknown format"});
  // A .gz whose bytes are damaged mid-stream, one that is cut short, one that is not gzip.
  write_gz(root / "ok.jsonl.gz", jsonl);
  std::string gz = read_bytes(root / "ok.jsonl.gz");
  std::string corrupt = gz;
  for (size_t i = 40; i < 80; ++i) corrupt[i] = char(corrupt[i] ^ 0x5a);
  write_bytes(root / "corrupt.jsonl.gz", corrupt);
  expect_failure(options("x", {file("corrupt.jsonl.gz")}), {"corrupt.jsonl.gz"});
  write_bytes(root / "short.jsonl.gz", gz.substr(0, gz.size() / 2));
  expect_failure(options("x", {file("short.jsonl.gz")}), {"short.jsonl.gz", "gzip"});
  write_bytes(root / "plain.jsonl.gz", jsonl);
  expect_failure(options("x", {file("plain.jsonl.gz")}), {"plain.jsonl.gz", "not gzip"});
  // The same for zstd.
  const std::string zst = zstd_bytes(jsonl);
  write_bytes(root / "short.jsonl.zst", zst.substr(0, zst.size() / 2));
  expect_failure(options("x", {file("short.jsonl.zst")}), {"short.jsonl.zst", "truncated"});
  write_bytes(root / "plain.jsonl.zst", jsonl);
  expect_failure(options("x", {file("plain.jsonl.zst")}), {"plain.jsonl.zst", "zstd"});
  // A string text field that is not a string, and a tokenizer that does not load.
  write_bytes(root / "num.jsonl", jsonl + "{\"text\": 5}\n");
  expect_failure(options("x", {file("num.jsonl")}), {"num.jsonl:401", "not a string"});
  write_bytes(root / "ok.jsonl", jsonl);
  write_bytes(root / "junk.model", "this is not a sentencepiece model");
  PrepareOptions o = options("x", {file("ok.jsonl")});
  o.tokenizer = file("junk.model");
  expect_failure(o, {"junk.model", "does not load"});
  o.tokenizer = file("absent.model");
  expect_failure(o, {"absent.model"});
}

TEST_F(Prepare, CommandLine) {
  auto run = [](std::vector<std::string> args) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    return fsdp::cli::prepare_command(int(argv.size()), argv.data());
  };
  write_bytes(root / "cli.jsonl", jsonl_of(paras));
  testing::internal::CaptureStdout();
  EXPECT_EQ(run({"prepare", "--help"}), 0);
  EXPECT_NE(testing::internal::GetCapturedStdout().find("blank lines"), std::string::npos);
  testing::internal::CaptureStderr();
  EXPECT_EQ(run({"prepare", "--output", file("cli_out"), file("cli.jsonl")}), 2);  // no --tokenizer
  EXPECT_EQ(run({"prepare", "--tokenizer", model, "--output", file("cli_out"), "--val-fraction", "x", file("cli.jsonl")}), 2);
  EXPECT_EQ(run({"prepare", "--tokenizer", model, "--output", file("cli_out"), "--bogus", file("cli.jsonl")}), 2);
  EXPECT_EQ(run({"prepare", "--tokenizer", model, "--output", file("cli_out"), file("nope.jsonl")}), 1);
  EXPECT_EQ(run({"prepare", "--vocab-size", "64.5", "--output", file("cli_out"), file("cli.jsonl")}), 2);
  EXPECT_EQ(run({"prepare", "--vocab-size", "64", "--tokenizer", model, "--output", file("cli_out"), file("cli.jsonl")}), 2);
  const std::string usage = testing::internal::GetCapturedStderr();
  EXPECT_NE(usage.find("--vocab-size N for pre-tokenized input_ids"), std::string::npos) << usage;
  write_bytes(root / "cli_ids.jsonl", "{\"input_ids\": [1, 2, 3]}\n{\"input_ids\": [63]}\n");
  testing::internal::CaptureStdout();
  EXPECT_EQ(run({"prepare", "--vocab-size", "64", "--output", file("cli_ids_out"), file("cli_ids.jsonl")}), 0);
  EXPECT_NE(testing::internal::GetCapturedStdout().find("train: 2 documents, 4 tokens"), std::string::npos);
  testing::internal::CaptureStderr();
  testing::internal::GetCapturedStderr();
  testing::internal::CaptureStdout();
  EXPECT_EQ(run({"prepare", "--tokenizer", model, "--output", file("cli_out"), "--workers", "2",
                 "--val-fraction=0.1", file("cli.jsonl")}),
            0);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("train:"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(root / "cli_out" / "manifest.json"));
}

}  // namespace

namespace {

using fsdp::Tensor;
using fsdp::DType;
using fsdp::data::Loader;
using fsdp::data::LoaderOptions;
using fsdp::data::SampleSource;
using fsdp::data::open_token_corpus;

// The whole data path: text -> prepare -> token shards -> Loader windows -> detokenize
// gives back the original paragraphs. Windows overlap by one token (stride seq_len), so
// the stream is every window's ids plus the last window's final target.
TEST_F(Prepare, TextThroughTheLoaderDecodesToTheOriginalDocuments) {
  write_bytes(root / "loader_rt.txt", txt_of(paras));
  const PrepareOptions o = options("loader_rt_out", {file("loader_rt.txt")});
  fsdp::data::prepare_corpus(o);
  const Tokenizer tok(model);
  const int64_t T = 16;
  std::shared_ptr<const SampleSource> corpus = open_token_corpus(o.output, "train", T, tok.vocab_size());
  LoaderOptions lo;
  lo.micro_batch = 1;
  lo.seq_len = T;
  lo.shuffle = false;
  lo.num_workers = 0;
  lo.prefetch = 0;
  Loader loader(corpus, lo);
  Tensor ids = Tensor::empty({T}, DType::I32), targets = Tensor::empty({T}, DType::I32);
  std::vector<int32_t> stream;
  for (int64_t w = 0; w < corpus->num_samples(); ++w) {
    loader.next(ids, targets);
    for (int64_t t = 0; t < T; ++t) stream.push_back(ids.data<int32_t>()[t]);
    if (w + 1 == corpus->num_samples()) stream.push_back(targets.data<int32_t>()[T - 1]);
  }
  // Split at BOS ... EOS; the stream ends inside the last document (the tail shorter
  // than a window is not a sample), so every complete document must match.
  std::vector<std::string> decoded;
  std::vector<int32_t> doc;
  for (int32_t id : stream) {
    if (id == tok.bos_id()) {
      doc.clear();
    } else if (id == tok.eos_id()) {
      decoded.push_back(tok.decode(doc));
    } else {
      doc.push_back(id);
    }
  }
  ASSERT_GE(decoded.size(), paras.size() - 1);
  for (size_t i = 0; i < decoded.size(); ++i) EXPECT_EQ(decoded[i], paras[i]) << "document " << i;
}

// prepare's UTF-8 check, Unicode's table of well-formed sequences: the offset of the first
// byte that breaks it.
TEST(PrepareUtf8, FirstInvalidByteIsFound) {
  using fsdp::data::first_invalid_utf8;
  constexpr size_t ok = std::string_view::npos;
  EXPECT_EQ(first_invalid_utf8("plain ascii"), ok);
  EXPECT_EQ(first_invalid_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF"), ok);  // é € 😀 U+10FFFF
  EXPECT_EQ(first_invalid_utf8("ab\xFF"), 2u);                // never a UTF-8 byte
  EXPECT_EQ(first_invalid_utf8("\xC0\xAF"), 0u);             // an overlong '/'
  EXPECT_EQ(first_invalid_utf8("x\xE0\x80\xAF"), 1u);       // an overlong three-byte form
  EXPECT_EQ(first_invalid_utf8("\xED\xA0\x80"), 0u);        // a surrogate, U+D800
  EXPECT_EQ(first_invalid_utf8("\xF4\x90\x80\x80"), 0u);   // past U+10FFFF
  EXPECT_EQ(first_invalid_utf8("ok \xE2\x82"), 3u);          // cut short
  EXPECT_EQ(first_invalid_utf8("\xC3("), 0u);                 // a continuation byte missing
}

}  // namespace
