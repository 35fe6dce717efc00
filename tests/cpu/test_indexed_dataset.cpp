// Megatron indexed-dataset shards: our writer and reader round-trip, the reader loads a
// shard megatron-core itself wrote (tests/golden/megatron), and every kind of damage to a
// shard is one fsdp::Error naming the file and the fault.
#include "fsdp/data/indexed_dataset.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"

namespace fsdp::data {
namespace {

namespace fs = std::filesystem;
using fsdp::test::expect_error;
using Docs = std::vector<std::vector<int32_t>>;

// A fresh directory under the system temp dir, removed with everything in it.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "fsdp_indexed_XXXXXX").string();
    EXPECT_NE(::mkdtemp(templ.data()), nullptr);
    path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string prefix(const std::string& name = "shard") const { return (path / name).string(); }
};

void write_shard(const std::string& prefix, int64_t vocab, const Docs& docs) {
  IndexedDatasetWriter w(prefix, vocab);
  for (const auto& d : docs) w.add_document(d.data(), int64_t(d.size()));
  EXPECT_EQ(w.num_documents(), int64_t(docs.size()));
  w.finish();
}

Docs read_all(const IndexedDataset& ds) {
  Docs out(size_t(ds.num_documents()));
  for (int64_t d = 0; d < ds.num_documents(); ++d) {
    out[size_t(d)].resize(size_t(ds.document_size(d)));
    ds.read(d, 0, ds.document_size(d), out[size_t(d)].data());
  }
  return out;
}

std::vector<unsigned char> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void spit(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

template <typename T>
void poke(std::vector<unsigned char>& bytes, size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

Docs random_docs(uint64_t seed, int64_t vocab, int n) {
  std::mt19937_64 rng(seed);
  Docs docs(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const size_t len = (i % 5 == 2) ? 0 : size_t(rng() % 300);  // every fifth document empty
    for (size_t t = 0; t < len; ++t) docs[size_t(i)].push_back(int32_t(rng() % uint64_t(vocab)));
  }
  docs.back().push_back(int32_t(vocab - 1));  // the largest id always appears
  return docs;
}

// Byte offsets in the .idx (see the header's layout comment).
constexpr size_t kVersionAt = 9, kDtypeAt = 17, kCountAt = 18, kHeader = 34;

void round_trip(int64_t vocab, uint8_t expected_code, uint64_t seed) {
  TempDir dir;
  const Docs docs = random_docs(seed, vocab, 40);
  write_shard(dir.prefix(), vocab, docs);
  EXPECT_EQ(slurp(dir.prefix() + ".idx")[kDtypeAt], expected_code);

  IndexedDataset ds(dir.prefix());
  int64_t total = 0;
  for (const auto& d : docs) total += int64_t(d.size());
  EXPECT_EQ(ds.prefix(), dir.prefix());
  EXPECT_EQ(ds.num_documents(), int64_t(docs.size()));
  EXPECT_EQ(ds.num_tokens(), total);
  EXPECT_EQ(read_all(ds), docs);
  EXPECT_EQ(ds.max_token(), int32_t(vocab - 1));
  EXPECT_EQ(fs::file_size(dir.prefix() + ".bin"), uint64_t(total) * (expected_code == 8 ? 2 : 4));

  // A slice from the middle of a document.
  std::vector<int32_t> part(5);
  ds.read(0, 3, 5, part.data());
  EXPECT_EQ(part, std::vector<int32_t>(docs[0].begin() + 3, docs[0].begin() + 8));
}

TEST(IndexedDataset, RoundTripUint16) { round_trip(32000, 8, 1); }
TEST(IndexedDataset, RoundTripUint16AtLimit) { round_trip(65536, 8, 2); }  // id 65535 in a uint16
TEST(IndexedDataset, RoundTripInt32) { round_trip(128256, 4, 3); }
TEST(IndexedDataset, RoundTripInt32JustPastUint16) { round_trip(65537, 4, 4); }

TEST(IndexedDataset, RoundTripEmptyShardAndEmptyDocuments) {
  TempDir dir;
  write_shard(dir.prefix("none"), 100, {});
  IndexedDataset none(dir.prefix("none"));
  EXPECT_EQ(none.num_documents(), 0);
  EXPECT_EQ(none.num_tokens(), 0);
  EXPECT_EQ(none.max_token(), -1);

  write_shard(dir.prefix("blank"), 100, Docs(3));
  IndexedDataset blank(dir.prefix("blank"));
  EXPECT_EQ(blank.num_documents(), 3);
  EXPECT_EQ(blank.document_size(1), 0);
  EXPECT_EQ(read_all(blank), Docs(3));
}

TEST(IndexedDataset, ReadsMegatronWrittenFixture) {
  // Written by megatron-core's IndexedDatasetBuilder (tests/golden/megatron/generate.py):
  // document 1 holds two sequences, so there are 6 sequences in 5 documents.
  const IndexedDataset ds(fsdp::test::source_path("tests/golden/megatron/sample_text_document"));
  std::vector<int32_t> last;
  for (int32_t t = 100; t < 140; ++t) last.push_back(t);
  const Docs expected = {{1, 2, 3, 4, 5}, {10, 11, 12}, {13, 14}, {}, {65535, 0, 32768, 255, 256}, last};
  EXPECT_EQ(ds.num_documents(), 6);
  EXPECT_EQ(ds.num_tokens(), 55);
  EXPECT_EQ(read_all(ds), expected);
  EXPECT_EQ(ds.max_token(), 65535);
}

TEST(IndexedDataset, ReadsOtherTokenDtypes) {
  // uint8 (1), int16 (3) and int64 (5) shards, as Megatron may write them: same layout,
  // only the code and the token width differ.
  for (const auto& [code, width] : {std::pair<uint8_t, int>{1, 1}, {3, 2}, {5, 8}}) {
    TempDir dir;
    write_shard(dir.prefix(), 60000, {{7, 8, 9}, {}, {120}});  // uint16 tokens
    auto idx = slurp(dir.prefix() + ".idx");
    idx[kDtypeAt] = code;
    poke<int64_t>(idx, kHeader + 3 * 4 + 8, 3 * width);  // pointer of document 1
    poke<int64_t>(idx, kHeader + 3 * 4 + 16, 3 * width);  // pointer of document 2
    spit(dir.prefix() + ".idx", idx);
    std::vector<unsigned char> bin(size_t(4 * width), 0);
    const int64_t values[] = {7, 8, 9, 120};
    for (int i = 0; i < 4; ++i) std::memcpy(bin.data() + i * width, &values[i], size_t(width));  // little-endian
    spit(dir.prefix() + ".bin", bin);
    const IndexedDataset ds(dir.prefix());
    EXPECT_EQ(read_all(ds), (Docs{{7, 8, 9}, {}, {120}})) << "dtype code " << int(code);
    EXPECT_EQ(ds.max_token(), 120);
  }
}

TEST(IndexedDataset, ReadOutsideDocumentThrows) {
  TempDir dir;
  write_shard(dir.prefix(), 100, {{1, 2, 3}});
  const IndexedDataset ds(dir.prefix());
  int32_t out[4];
  EXPECT_ERROR_MENTIONS(ds.read(0, 1, 3, out), "document 0 of 3 tokens");
  EXPECT_ERROR_MENTIONS(ds.read(1, 0, 1, out), "document 1 out of range");
  EXPECT_ERROR_MENTIONS(ds.document_size(-1), "out of range");
}

// ----- damaged shards: each a clear error naming the file ------------------------------

struct DamagedShard : TempDir {
  std::string idx_path, bin_path;
  std::vector<unsigned char> idx, bin;
  DamagedShard() {
    write_shard(prefix(), 1000, {{1, 2, 3, 4}, {5, 6}, {7, 8, 9}});
    idx_path = prefix() + ".idx";
    bin_path = prefix() + ".bin";
    idx = slurp(idx_path);
    bin = slurp(bin_path);
  }
  void save() {
    spit(idx_path, idx);
    spit(bin_path, bin);
  }
  void expect_open_error(std::initializer_list<std::string> parts) {
    save();
    expect_error([&] { IndexedDataset ds(prefix()); }, parts, "IndexedDataset(prefix)");
  }
};

TEST(IndexedDataset, MissingIdx) {
  DamagedShard s;
  fs::remove(s.idx_path);
  expect_error([&] { IndexedDataset ds(s.prefix()); }, {s.idx_path, "cannot open"});
}

TEST(IndexedDataset, MissingBin) {
  DamagedShard s;
  fs::remove(s.bin_path);
  expect_error([&] { IndexedDataset ds(s.prefix()); }, {s.bin_path, "cannot open"});
}

TEST(IndexedDataset, BadMagic) {
  DamagedShard s;
  s.idx[0] = 'X';
  s.expect_open_error({s.idx_path, "bad magic (not a Megatron indexed dataset)"});
}

TEST(IndexedDataset, WrongVersion) {
  DamagedShard s;
  poke<uint64_t>(s.idx, kVersionAt, 2);
  s.expect_open_error({s.idx_path, "version 2"});
}

TEST(IndexedDataset, UnsupportedDtypeCode) {
  DamagedShard s;
  s.idx[kDtypeAt] = 7;  // float32
  s.expect_open_error({s.idx_path, "dtype code 7 (float32)"});
  s.idx[kDtypeAt] = 42;
  s.expect_open_error({s.idx_path, "dtype code 42"});
}

TEST(IndexedDataset, TruncatedIdx) {
  DamagedShard s;
  s.idx.resize(s.idx.size() - 8);  // the last doc_idx entry is gone
  s.expect_open_error({s.idx_path, "truncated"});
  s.idx.resize(20);  // inside the header
  s.expect_open_error({s.idx_path, "20 bytes, shorter than the 34-byte header"});
}

TEST(IndexedDataset, CountsDisagreeWithIdxLength) {
  DamagedShard s;
  poke<uint64_t>(s.idx, kCountAt, 4);  // N = 4 sequences, the file holds 3
  s.expect_open_error({s.idx_path, "4 sequences"});
  poke<uint64_t>(s.idx, kCountAt, ~uint64_t(0) / 2);  // a count so large that N * 12 overflows
  s.expect_open_error({s.idx_path, "far more"});
}

TEST(IndexedDataset, BinShorterThanIndex) {
  DamagedShard s;
  s.bin.resize(s.bin.size() - 2);
  s.expect_open_error({s.bin_path + ": 16 bytes but the index describes 18"});
}

TEST(IndexedDataset, BinLongerThanIndex) {
  DamagedShard s;
  s.bin.resize(s.bin.size() + 2);
  s.expect_open_error({s.bin_path + ": 20 bytes but the index describes 18"});
}

TEST(IndexedDataset, PointerInconsistentWithSizes) {
  DamagedShard s;
  poke<int64_t>(s.idx, kHeader + 3 * 4 + 8, 10);  // document 1 should start at byte 8
  s.expect_open_error({s.idx_path, "sequence 1 starts at byte 10", "put it at byte 8"});
}

TEST(IndexedDataset, NegativeSize) {
  DamagedShard s;
  poke<int32_t>(s.idx, kHeader + 4, -2);
  s.expect_open_error({s.idx_path, "sequence 1 has negative size -2"});
}

TEST(IndexedDataset, DocumentIndexBroken) {
  const size_t doc_idx_at = kHeader + 3 * 4 + 3 * 8;
  {
    DamagedShard s;
    poke<int64_t>(s.idx, doc_idx_at, 1);
    s.expect_open_error({s.idx_path, "document index starts at 1"});
  }
  {
    DamagedShard s;
    poke<int64_t>(s.idx, doc_idx_at + 2 * 8, 0);  // 0, 1, 0, 3
    s.expect_open_error({s.idx_path, "entry 2 is 0, less than the previous 1"});
  }
  {
    DamagedShard s;
    poke<int64_t>(s.idx, doc_idx_at + 3 * 8, 2);  // ends at 2, not N = 3
    s.expect_open_error({s.idx_path, "ends at 2", "sequence count 3"});
  }
}

// ----- writer ---------------------------------------------------------------------------

TEST(IndexedDataset, IdOutsideVocabAtWrite) {
  TempDir dir;
  IndexedDatasetWriter w(dir.prefix(), 100);
  const std::vector<int32_t> ok = {1, 2}, big = {5, 100}, negative = {-1};
  w.add_document(ok.data(), 2);
  expect_error([&] { w.add_document(big.data(), 2); }, {dir.prefix(), "document 1", "token 1", "id 100", "[0, 100)"});
  expect_error([&] { w.add_document(negative.data(), 1); }, {dir.prefix(), "document 1", "id -1"});
  // The rejected documents left nothing behind: the shard holds the good one only.
  w.add_document(ok.data(), 2);
  w.finish();
  EXPECT_EQ(read_all(IndexedDataset(dir.prefix())), (Docs{{1, 2}, {1, 2}}));
}

TEST(IndexedDataset, UnfinishedWriterLeavesNoShard) {
  TempDir dir;
  {
    IndexedDatasetWriter w(dir.prefix(), 100);
    const std::vector<int32_t> doc = {1, 2, 3};
    w.add_document(doc.data(), 3);
    EXPECT_TRUE(fs::exists(dir.prefix() + ".bin.tmp"));
  }
  EXPECT_TRUE(fs::is_empty(dir.path)) << "no .bin, .idx or .tmp may remain";
}

TEST(IndexedDataset, FinishedWriterLeavesOnlyTheShard) {
  TempDir dir;
  write_shard(dir.prefix(), 100, {{1}});
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"shard.bin", "shard.idx"}));
}

TEST(IndexedDataset, WriterMisuse) {
  TempDir dir;
  expect_error([&] { IndexedDatasetWriter w(dir.prefix(), 0); }, {"vocab_size 0"});
  expect_error([&] { IndexedDatasetWriter w((dir.path / "no_such_dir" / "x").string(), 10); }, {"cannot create"});
  IndexedDatasetWriter w(dir.prefix(), 10);
  w.finish();
  const int32_t t = 1;
  expect_error([&] { w.add_document(&t, 1); }, {"after finish()"});
  expect_error([&] { w.finish(); }, {"finish() called twice"});
}

}  // namespace
}  // namespace fsdp::data
