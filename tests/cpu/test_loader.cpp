// The token corpus and the streaming loader (loader.h): window contents, the global order
// (a partition over ranks, independent of the world size, a new permutation each epoch),
// resuming by seek(), prefetching bit-identical to reading inline, and the errors.
#include <gtest/gtest.h>

#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdp/data/indexed_dataset.h"
#include "fsdp/data/loader.h"
#include "fsdp/data/synthetic_samples.h"
#include "test_util.h"

namespace fsdp::data {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSeq = 4;
constexpr int64_t kVocab = 1000;

// A fresh directory under the system temp dir, removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() / (std::string("fsdp_loader_") + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
};

// Token at offset t of the concatenated stream is t itself, so a window's first id tells
// which sample it is. Two shards; documents of uneven sizes, one empty, a one-token one:
// windows cross document and shard boundaries. 149 tokens -> (149 - 1) / 4 = 37 windows.
const std::vector<std::vector<int64_t>> kShardDocs = {{10, 0, 23, 5}, {1, 60, 50}};
constexpr int64_t kTokens = 149, kSamples = 37;

void write_corpus(const std::string& dir, const std::string& split = "train") {
  int32_t t = 0;
  for (size_t s = 0; s < kShardDocs.size(); ++s) {
    IndexedDatasetWriter w(dir + "/" + split + "_0000" + std::to_string(s), kVocab);
    for (int64_t n : kShardDocs[s]) {
      std::vector<int32_t> doc(static_cast<size_t>(n));
      for (auto& x : doc) x = t++;
      w.add_document(doc.data(), n);
    }
    w.finish();
  }
  ASSERT_EQ(t, kTokens);
}

LoaderOptions options(int64_t micro, int64_t accum, int rank, int world, int workers = 0, int prefetch = 0) {
  LoaderOptions o;
  o.micro_batch = micro;
  o.seq_len = kSeq;
  o.accum = accum;
  o.rank = rank;
  o.world = world;
  o.seed = 1234;
  o.num_workers = workers;
  o.prefetch = prefetch;
  return o;
}

struct Batch {
  std::vector<int32_t> ids, targets;
  bool operator==(const Batch&) const = default;
};

std::vector<Batch> take(Loader& loader, const LoaderOptions& o, int64_t count) {
  Tensor ids = Tensor::empty({o.micro_batch, o.seq_len}, DType::I32);
  Tensor targets = Tensor::empty({o.micro_batch, o.seq_len}, DType::I32);
  std::vector<Batch> out;
  for (int64_t j = 0; j < count; ++j) {
    loader.next(ids, targets);
    const int32_t* a = ids.data<int32_t>();
    const int32_t* b = targets.data<int32_t>();
    out.push_back({std::vector<int32_t>(a, a + ids.numel()), std::vector<int32_t>(b, b + targets.numel())});
  }
  return out;
}

// global position -> sample read there, over `steps` optimizer steps of every rank; fails
// if two ranks (or two micro-batches) claim one position.
std::map<int64_t, int64_t> global_order(const std::shared_ptr<const SampleSource>& src, int world, int64_t micro,
                                        int64_t accum, int64_t steps) {
  std::map<int64_t, int64_t> order;
  for (int r = 0; r < world; ++r) {
    const LoaderOptions o = options(micro, accum, r, world, r % 2, 2 * (r % 2));
    Loader loader(src, o);
    const std::vector<Batch> batches = take(loader, o, steps * accum);
    for (int64_t j = 0; j < int64_t(batches.size()); ++j) {
      for (int64_t s = 0; s < micro; ++s) {
        const int64_t p = loader.first_position(j) + s;
        EXPECT_TRUE(order.emplace(p, batches[size_t(j)].ids[size_t(s * kSeq)] / kSeq).second)
            << "position " << p << " read twice (world " << world << ")";
      }
    }
  }
  return order;
}

TEST(Loader, WindowsHaveTheRightContents) {
  TempDir dir;
  write_corpus(dir.str());
  auto src = open_token_corpus(dir.str(), "train", kSeq, kVocab);
  ASSERT_EQ(src->num_samples(), kSamples);
  ASSERT_EQ(src->seq_len(), kSeq);
  std::vector<int32_t> window(kSeq + 1);
  for (int64_t i = 0; i < kSamples; ++i) {  // stride seq_len: consecutive windows share a token
    src->read_sample(i, window.data());
    for (int64_t k = 0; k <= kSeq; ++k) ASSERT_EQ(window[size_t(k)], i * kSeq + k) << "sample " << i;
  }
  // Through the loader, in order: ids are the window's first seq_len tokens, targets the
  // same shifted by one.
  LoaderOptions o = options(3, 1, 0, 1);
  o.shuffle = false;
  Loader loader(std::move(src), o);
  const std::vector<Batch> b = take(loader, o, 2);
  for (int64_t j = 0; j < 2; ++j)
    for (int64_t s = 0; s < 3; ++s)
      for (int64_t k = 0; k < kSeq; ++k) {
        const int64_t sample = j * 3 + s;
        EXPECT_EQ(b[size_t(j)].ids[size_t(s * kSeq + k)], sample * kSeq + k);
        EXPECT_EQ(b[size_t(j)].targets[size_t(s * kSeq + k)], sample * kSeq + k + 1);
      }
}

TEST(Loader, SingleShardPrefix) {
  TempDir dir;
  write_corpus(dir.str());
  auto src = open_token_corpus(dir.str() + "/train_00001", "ignored", kSeq, kVocab);
  EXPECT_EQ(src->num_samples(), (111 - 1) / kSeq);
  std::vector<int32_t> window(kSeq + 1);
  src->read_sample(0, window.data());
  EXPECT_EQ(window[0], 38);
}

TEST(Loader, RanksPartitionEveryEpochAndTheOrderIgnoresWorldSize) {
  TempDir dir;
  write_corpus(dir.str());
  std::shared_ptr<const SampleSource> src = open_token_corpus(dir.str(), "train", kSeq, kVocab);
  std::map<int64_t, int64_t> reference;
  for (int world : {1, 2, 3, 4}) {
    const int64_t micro = 2, accum = 3, g = micro * accum * world;
    const int64_t steps = (3 * kSamples + g - 1) / g;  // at least three whole epochs
    const std::map<int64_t, int64_t> order = global_order(src, world, micro, accum, steps);
    ASSERT_EQ(int64_t(order.size()), steps * g) << "world " << world;
    ASSERT_EQ(order.begin()->first, 0);
    ASSERT_EQ(order.rbegin()->first, steps * g - 1);  // so every position in [0, steps*G) once
    for (int64_t e = 0; e < 3; ++e) {
      std::vector<int64_t> samples;
      for (int64_t p = e * kSamples; p < (e + 1) * kSamples; ++p) samples.push_back(order.at(p));
      std::sort(samples.begin(), samples.end());
      std::vector<int64_t> all(kSamples);
      std::iota(all.begin(), all.end(), 0);
      EXPECT_EQ(samples, all) << "world " << world << " epoch " << e << " is not the whole sample set";
    }
    if (world == 1) {
      reference = order;
    } else {
      for (const auto& [p, s] : order)
        if (reference.count(p)) EXPECT_EQ(s, reference.at(p)) << "world " << world << " position " << p;
    }
  }
}

TEST(Loader, EachEpochIsADifferentPermutation) {
  TempDir dir;
  write_corpus(dir.str());
  std::shared_ptr<const SampleSource> src = open_token_corpus(dir.str(), "train", kSeq, kVocab);
  LoaderOptions o = options(1, 1, 0, 1);
  Loader loader(src, o);
  std::vector<std::vector<int64_t>> epochs(3);
  for (auto& e : epochs) {
    EXPECT_EQ(loader.epoch(), &e - epochs.data());
    for (const Batch& b : take(loader, o, kSamples)) e.push_back(b.ids[0] / kSeq);
  }
  std::vector<int64_t> identity(kSamples);
  std::iota(identity.begin(), identity.end(), 0);
  for (const auto& e : epochs) {
    std::vector<int64_t> sorted = e;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, identity);
    EXPECT_NE(e, identity);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  // The order is a function of the seed alone; shuffle off is the identity.
  Loader again(src, o);
  std::vector<int64_t> first;
  for (const Batch& b : take(again, o, kSamples)) first.push_back(b.ids[0] / kSeq);
  EXPECT_EQ(first, epochs[0]);
  o.shuffle = false;
  Loader plain(src, o);
  std::vector<int64_t> unshuffled;
  for (const Batch& b : take(plain, o, kSamples)) unshuffled.push_back(b.ids[0] / kSeq);
  EXPECT_EQ(unshuffled, identity);
}

TEST(Loader, SeekResumesExactly) {
  TempDir dir;
  write_corpus(dir.str());
  std::shared_ptr<const SampleSource> src = open_token_corpus(dir.str(), "train", kSeq, kVocab);
  for (int workers : {0, 2}) {
    const LoaderOptions o = options(3, 2, 1, 2, workers, 3 * workers);
    Loader whole(src, o);
    const std::vector<Batch> reference = take(whole, o, 40);  // crosses several epochs
    for (int64_t stop : {0, 1, 2, 5, 12, 13, 30}) {
      Loader first(src, o);
      take(first, o, stop);
      ASSERT_EQ(first.position(), stop);
      Loader resumed(src, o);
      resumed.seek(first.position());
      const std::vector<Batch> rest = take(resumed, o, 40 - stop);
      for (int64_t j = stop; j < 40; ++j)
        ASSERT_EQ(rest[size_t(j - stop)], reference[size_t(j)]) << "workers " << workers << " stop " << stop;
      // seek() on a running loader, backwards, drops its prefetched work.
      first.seek(0);
      ASSERT_EQ(take(first, o, 3), std::vector<Batch>(reference.begin(), reference.begin() + 3));
    }
  }
}

TEST(Loader, PrefetchIsBitIdenticalToReadingInline) {
  TempDir dir;
  write_corpus(dir.str());
  std::shared_ptr<const SampleSource> corpus = open_token_corpus(dir.str(), "train", kSeq, kVocab);
  std::shared_ptr<const SampleSource> synthetic = std::make_shared<SyntheticSamples>(97, kSeq, 5);
  for (const auto& src : {corpus, synthetic}) {
    LoaderOptions inline_opt = options(5, 2, 2, 3, 0, 0), ahead = options(5, 2, 2, 3, 2, 4);
    inline_opt.shuffle = ahead.shuffle = src == corpus;
    Loader a(src, inline_opt), b(src, ahead);
    EXPECT_EQ(take(a, inline_opt, 60), take(b, ahead, 60));
    EXPECT_GE(b.wait_seconds(), 0.0);
  }
}

TEST(Loader, SyntheticSamplesAreTheSyntheticSourceWindows) {
  const SyntheticSamples samples(50, 8, 3);
  Tensor ids = Tensor::empty({4, 8}, DType::I32), targets = Tensor::empty({4, 8}, DType::I32);
  samples.source().fill(100, 4, ids, targets);
  std::vector<int32_t> window(9);
  for (int64_t s = 0; s < 4; ++s) {
    samples.read_sample(100 + s, window.data());
    for (int64_t k = 0; k < 8; ++k) {
      EXPECT_EQ(window[size_t(k)], ids.at<int32_t>({s, k}));
      EXPECT_EQ(window[size_t(k + 1)], targets.at<int32_t>({s, k}));
    }
  }
  EXPECT_GT(samples.num_samples(), int64_t(1) << 60);
  // An unbounded source cannot be shuffled by a permutation in memory: say so.
  EXPECT_ERROR_MENTIONS(Loader(std::make_shared<SyntheticSamples>(50, kSeq, 3), options(1, 1, 0, 1)), "shuffle: false");
}

TEST(Loader, TokenOutsideTheVocabularyIsAnError) {
  TempDir dir;
  write_corpus(dir.str());  // ids 0..148
  // Vocabulary 120: the first bad id, 120, is token 21 of shard train_00001's document 2
  // (shard 1 holds stream offsets 38, 39..98 and 99..148): token 1 + 60 + 21 = 82 of the
  // shard. Found when the corpus opens (Note [Shard verification]), not when a step reads it.
  fsdp::test::expect_error([&] { open_token_corpus(dir.str(), "train", kSeq, 120); },
                           {"token shard " + dir.str() + "/train_00001: token 82 (document 2, offset 21) has id 120, "
                            "outside the vocabulary of 120 tokens"});
  // Verified in the background (a corpus above sync_check_bytes): the loader's next read
  // after the finding stops the run, from a worker thread through next().
  CorpusOptions background;
  background.sync_check_bytes = 0;
  auto src = open_token_corpus(dir.str(), "train", kSeq, 120, background);
  LoaderOptions o = options(2, 1, 0, 1, 2, 2);
  o.shuffle = false;
  Loader loader(std::move(src), o);
  std::string error;
  for (int i = 0; i < 1000 && error.empty(); ++i) {  // every read past the window with id 120 fails anyway
    try {
      take(loader, o, 1);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  EXPECT_NE(error.find("train_00001"), std::string::npos) << error;
  EXPECT_ERROR_MENTIONS(take(loader, o, 1), "train_00001");  // it stays failed until seek()
}

// zlib's CRC-32 of a file: the reference for the checksums `prepare` records.
uint32_t file_crc(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return uint32_t(crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), uInt(bytes.size())));
}

// manifest.json beside the shards, as `prepare` writes it: each shard's sizes and CRC-32s.
void write_checksums(const std::string& dir) {
  nlohmann::json sums = nlohmann::json::object();
  for (const char* shard : {"train_00000", "train_00001"}) {
    const std::string p = dir + "/" + shard;
    sums[shard] = {{"bin_bytes", fs::file_size(p + ".bin")}, {"bin_crc32", file_crc(p + ".bin")},
                   {"idx_bytes", fs::file_size(p + ".idx")}, {"idx_crc32", file_crc(p + ".idx")}};
  }
  std::ofstream(dir + "/manifest.json") << nlohmann::json{{"vocab_size", kVocab}, {"shard_checksums", sums}}.dump();
}

// Flips one bit of token `index` of a shard's .bin (uint16 tokens): still an id in the
// vocabulary, so only the checksum can tell.
void flip_token(const std::string& bin, int64_t index) {
  std::fstream f(bin, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(2 * index);
  char b = 0;
  f.read(&b, 1);
  b = char(b ^ 0x01);
  f.seekp(2 * index);
  f.write(&b, 1);
}

TEST(ShardCheck, AnInVocabularyBitFlipFailsTheChecksum) {
  TempDir dir;
  write_corpus(dir.str());
  write_checksums(dir.str());
  EXPECT_EQ(open_token_corpus(dir.str(), "train", kSeq, kVocab)->num_samples(), kSamples);
  flip_token(dir.str() + "/train_00001.bin", 30);
  fsdp::test::expect_error([&] { open_token_corpus(dir.str(), "train", kSeq, kVocab); },
                           {"token shard file " + dir.str() + "/train_00001.bin: CRC-32 ",
                            "does not match manifest.json's"});
  // A large corpus is verified in the background: it opens, and the first read after the
  // finding stops the run (the flipped id itself reads fine).
  CorpusOptions background;
  background.sync_check_bytes = 0;
  auto src = open_token_corpus(dir.str(), "train", kSeq, kVocab, background);
  std::vector<int32_t> window(kSeq + 1);
  std::string error;
  const auto t0 = std::chrono::steady_clock::now();
  while (error.empty() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
    try {
      src->read_sample(20, window.data());
    } catch (const Error& e) {
      error = e.what();
    }
  }
  EXPECT_NE(error.find("train_00001.bin: CRC-32"), std::string::npos) << error;
  // Each rank verifies its share: rank 0 of 2 has train_00000 only, rank 1 train_00001.
  CorpusOptions rank0;
  rank0.world = 2;
  EXPECT_EQ(open_token_corpus(dir.str(), "train", kSeq, kVocab, rank0)->num_samples(), kSamples);
  CorpusOptions rank1 = rank0;
  rank1.rank = 1;
  EXPECT_ERROR_MENTIONS(open_token_corpus(dir.str(), "train", kSeq, kVocab, rank1), "train_00001.bin");
  // A replaced index of another size.
  write_checksums(dir.str());
  std::ofstream(dir.str() + "/train_00000.idx", std::ios::app) << "x";
  EXPECT_ERROR_MENTIONS(open_token_corpus(dir.str(), "train", kSeq, kVocab), "train_00000.idx");
}

// Shards made by Megatron-LM or NeMo carry no checksums: they load, and the run says what
// was not verified.
TEST(ShardCheck, ShardsWithoutChecksumsLoadAndSaySo) {
  TempDir dir;
  write_corpus(dir.str());
  std::string note;
  CorpusOptions o;
  o.note = [&](const std::string& text) { note = text; };
  EXPECT_EQ(open_token_corpus(dir.str(), "train", kSeq, kVocab, o)->num_samples(), kSamples);
  EXPECT_NE(note.find("2 of 2 shard(s) have no checksum"), std::string::npos) << note;
  EXPECT_NE(note.find("Megatron-LM or NeMo"), std::string::npos) << note;
  write_checksums(dir.str());
  note.clear();
  open_token_corpus(dir.str(), "train", kSeq, kVocab, o);
  EXPECT_EQ(note, "");
}

TEST(Loader, MissingOrTooSmallCorpusIsAnError) {
  TempDir dir;
  EXPECT_ERROR_MENTIONS(open_token_corpus(dir.str(), "train", kSeq, kVocab), dir.str());
  fsdp::test::expect_error([&] { open_token_corpus(dir.str(), "train", kSeq, kVocab); }, {"'train'", "no token shards"});
  EXPECT_ERROR_MENTIONS(open_token_corpus(dir.str() + "/nowhere", "train", kSeq, kVocab), "nowhere");
  write_corpus(dir.str(), "val");
  EXPECT_ERROR_MENTIONS(open_token_corpus(dir.str(), "train", kSeq, kVocab), "'train'");
  EXPECT_EQ(open_token_corpus(dir.str(), "val", kSeq, kVocab)->num_samples(), kSamples);
  EXPECT_ERROR_MENTIONS(open_token_corpus(dir.str(), "val", kTokens, kVocab), "fewer than one window");
  EXPECT_EQ(open_token_corpus(dir.str(), "val", kTokens - 1, kVocab)->num_samples(), 1);
}

TEST(Loader, RejectsInconsistentOptions) {
  auto src = std::make_shared<SyntheticSamples>(50, kSeq, 3);
  LoaderOptions o = options(1, 1, 2, 2);
  o.shuffle = false;
  EXPECT_ERROR_MENTIONS(Loader(src, o), "rank 2");
  o = options(1, 1, 0, 1);
  o.shuffle = false;
  o.seq_len = kSeq + 1;
  EXPECT_ERROR_MENTIONS(Loader(src, o), "seq_len");
  o.seq_len = kSeq;
  Loader loader(src, o);
  Tensor wrong = Tensor::empty({2, kSeq}, DType::I32);
  EXPECT_ERROR_MENTIONS(loader.next(wrong, wrong), "micro_batch 1");
}

}  // namespace
}  // namespace fsdp::data
