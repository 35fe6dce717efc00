// Text generation: the KV-cache decoder against the full forward pass, greedy generation
// against transformers' generate() (tests/golden/llama_gqa_tiny/greedy_generate.json, from
// tests/golden/generate_greedy.py), the sampler's temperature / top-k / top-p / seed
// contract, and `fsdp_train generate` as a user runs it.
//
// Tolerance 1e-5 (norm-wise relative) for decoder vs forward: both run the same float32
// ops on the same weights; they differ only in the order attention sums its terms (the
// decode kernel's per-row loop vs the training kernel's tiles), ~1e-7 per attention output,
// which the rest of the network carries to the logits: measured 1.2e-6 to 2.5e-6 for the
// splits below. A cache bug (a wrong RoPE position, a stale row) changes what attention
// computes, not how it rounds, and lands orders of magnitude above that.
#include <gtest/gtest.h>
#include <sentencepiece_trainer.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../common/count_allocations.h"
#include "../common/made_up_tokenizer.h"
#include "fsdp/ckpt/hf_import.h"
#if defined(FSDP_WITH_CUDA)
#include "fsdp/core/cuda.h"
#endif
#include "fsdp/core/random.h"
#include "fsdp/model/generate.h"
#include "fsdp/model/decoder.h"
#include "fsdp/model/llama_decode.h"
#include "fsdp/model/local_params.h"
#include "fsdp/model/sampling.h"
#include "fsdp/ops/cross_entropy.h"
#include "test_util.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;
using model::LlamaDecoder;
using model::Sampler;
using model::SamplingOptions;

constexpr double kDecodeTolerance = 1e-5;

std::string golden_dir() { return test::source_path("tests/golden/llama_gqa_tiny"); }

// The golden model's weights, every unit in float32.
struct Golden {
  model::LlamaConfig cfg = ckpt::read_hf_llama_config(golden_dir());
  model::Llama llama{cfg};
  model::LocalParams params{llama.units()};
  Golden() {
    const ckpt::SafetensorsFolder folder(golden_dir());
    for (int u = 0; u < params.num_units(); ++u) ckpt::load_hf_unit(folder, llama.units()[size_t(u)], params.params(u));
  }
};

Golden& golden() {
  static Golden g;
  return g;
}

// Seeded token ids in [0, V).
std::vector<int32_t> random_ids(int64_t n, int64_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = int32_t(rng() % uint64_t(V));
  return ids;
}

// Logits [B*T, V] of the full forward pass over ids (B rows of T).
Tensor full_forward_logits(const std::vector<int32_t>& ids, int64_t B) {
  Golden& g = golden();
  const int64_t T = int64_t(ids.size()) / B;
  model::LlamaActivations act(g.cfg, B, T, DType::F32, Device::cpu());
  for (int64_t i = 0; i < B * T; ++i) {
    act.ids.set({i}, ids[size_t(i)]);
    act.targets.set({i}, double(kIgnoreIndex));
  }
  g.llama.forward(act, g.params);
  return act.logits.clone();
}

// Feeds ids (B rows of T) to a fresh decoder in chunks of the given sizes, every row's
// logits kept: [B*T, V] in the same (b, t) order as the full forward.
Tensor decoder_logits(LlamaDecoder& dec, const std::vector<int32_t>& ids, int64_t B,
                      const std::vector<int64_t>& chunks) {
  const int64_t T = int64_t(ids.size()) / B, V = dec.config().vocab_size;
  Tensor all = Tensor::empty({B * T, V}, DType::F32);
  dec.reset();
  int64_t pos = 0;
  for (int64_t n : chunks) {
    Tensor chunk = Tensor::empty({B, n}, DType::I32);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < n; ++t) chunk.set({b, t}, ids[size_t(b * T + pos + t)]);
    const Tensor logits = dec.forward(chunk, golden().params, /*all_rows=*/true);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < n; ++t) all.select(0, b * T + pos + t).copy_(logits.select(0, b * n + t));
    pos += n;
  }
  EXPECT_EQ(pos, T);
  EXPECT_EQ(dec.position(), T);
  return all;
}

// Worst norm-wise relative error of one row (position) of a against b.
double worst_row_error(const Tensor& a, const Tensor& b) {
  double worst = 0;
  for (int64_t r = 0; r < a.size(0); ++r) worst = std::max(worst, test::rel_error(a.select(0, r), b.select(0, r)));
  return worst;
}

// ---- (a) the KV-cache decoder computes the forward pass ------------------------------

TEST(Generate, DecoderLogitsEqualFullForwardAtEveryPosition) {
  Golden& g = golden();
  const int64_t T = 48;
  const std::vector<int32_t> ids = random_ids(T, g.cfg.vocab_size, 21);
  const Tensor ref = full_forward_logits(ids, 1);
  LlamaDecoder dec(g.cfg, 1, g.cfg.max_seq_len, T);
  const std::vector<std::vector<int64_t>> splits = {
      {T},                                    // prefill only
      std::vector<int64_t>(size_t(T), 1),     // one token at a time
      {1, 12, 35},                            // prefill split at several points
      {17, 1, 1, 29},
      {5, 5, 5, 5, 28},
  };
  for (const auto& chunks : splits) {
    const Tensor got = decoder_logits(dec, ids, 1, chunks);
    EXPECT_LT(worst_row_error(got, ref), kDecodeTolerance) << "split into " << chunks.size() << " chunks";
  }
}

TEST(Generate, DecoderBatchOfTwoEqualsFullForward) {
  Golden& g = golden();
  const int64_t B = 2, T = 13;
  const std::vector<int32_t> ids = random_ids(B * T, g.cfg.vocab_size, 22);
  const Tensor ref = full_forward_logits(ids, B);
  LlamaDecoder dec(g.cfg, B, 20, 8);
  for (const std::vector<int64_t>& chunks : {std::vector<int64_t>{8, 5}, std::vector<int64_t>{4, 1, 1, 7}})
    EXPECT_LT(worst_row_error(decoder_logits(dec, ids, B, chunks), ref), kDecodeTolerance);
}

TEST(Generate, LastRowLogitsAreTheLastPositionsAndStepsAllocateNothing) {
  Golden& g = golden();
  const std::vector<int32_t> ids = random_ids(30, g.cfg.vocab_size, 23);
  const Tensor ref = full_forward_logits(ids, 1);
  LlamaDecoder dec(g.cfg, 1, 30, 10);
  Tensor chunk = Tensor::empty({1, 10}, DType::I32);
  for (int64_t t = 0; t < 10; ++t) chunk.set({0, t}, ids[size_t(t)]);
  Tensor last = dec.forward(chunk, g.params);
  ASSERT_EQ(last.sizes(), (Dims{1, g.cfg.vocab_size}));
  EXPECT_LT(test::rel_error(last, ref.select(0, 9)), kDecodeTolerance);
  Tensor one = Tensor::empty({1, 1}, DType::I32);
  uint64_t allocations = 0;
  for (int64_t t = 10; t < 30; ++t) {
    one.set({0, 0}, ids[size_t(t)]);
    const uint64_t before = test::heap_allocations();
    last = dec.forward(one, g.params);
    allocations += test::heap_allocations() - before;  // every buffer was sized by the prefill
    EXPECT_LT(test::rel_error(last, ref.select(0, t)), kDecodeTolerance) << "position " << t;
  }
  EXPECT_EQ(allocations, 0u);
  EXPECT_ERROR_MENTIONS(dec.forward(one, g.params), "exceed the cache's 30 positions");
}

TEST(Generate, DecoderRefusesBadShapes) {
  Golden& g = golden();
  EXPECT_ERROR_MENTIONS(LlamaDecoder(g.cfg, 1, g.cfg.max_seq_len + 1, 4), "max_len");
  LlamaDecoder dec(g.cfg, 1, 16, 4);
  EXPECT_ERROR_MENTIONS(dec.forward(Tensor::zeros({1, 5}, DType::I32), g.params), "expected 1 .. 4");
  EXPECT_ERROR_MENTIONS(dec.forward(Tensor::zeros({2, 1}, DType::I32), g.params), "batch 1");
  Tensor bad = Tensor::zeros({1, 1}, DType::I32);
  bad.set({0, 0}, 96);
  EXPECT_ERROR_MENTIONS(dec.forward(bad, g.params), "96");
}

// ---- (b) greedy generation equals transformers' ---------------------------------------

TEST(Generate, GreedyEqualsTransformersGenerate) {
  Golden& g = golden();
  std::ifstream in(golden_dir() + "/greedy_generate.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json fixture = nlohmann::json::parse(in);
  const int32_t eos = fixture["eos_token_id"].get<int32_t>();
  ASSERT_EQ(fixture["cases"].size(), 5u);
  int eos_cases = 0;
  for (const auto& c : fixture["cases"]) {
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto expected = c["expected_ids"].get<std::vector<int32_t>>();
    const int64_t max_new = c["max_new_tokens"].get<int64_t>();
    // Prefill in one chunk and in chunks of 8 (the loop's chunked prefill).
    for (int64_t chunk : {int64_t(prompt.size()), int64_t(8)}) {
      LlamaDecoder dec(g.cfg, 1, g.cfg.max_seq_len, std::min<int64_t>(chunk, g.cfg.max_seq_len));
      Sampler greedy(SamplingOptions{.temperature = 0});
      std::vector<int32_t> streamed;
      const auto r = model::generate(dec, g.params, prompt, greedy, max_new, eos,
                                     [&](int32_t id) { streamed.push_back(id); });
      EXPECT_EQ(r.tokens, expected) << "prompt of " << prompt.size() << " tokens, chunk " << chunk;
      EXPECT_EQ(streamed, r.tokens);
      EXPECT_EQ(r.hit_eos, c["hit_eos"].get<bool>());
    }
    eos_cases += c["hit_eos"].get<bool>() ? 1 : 0;
  }
  EXPECT_EQ(eos_cases, 1);  // the stop-at-EOS path is part of the comparison
}

TEST(Generate, StopsAtTheCacheLength) {
  Golden& g = golden();
  LlamaDecoder dec(g.cfg, 1, 10, 4);
  Sampler greedy(SamplingOptions{.temperature = 0});
  const std::vector<int32_t> prompt = {1, 5, 6, 7};
  const auto r = model::generate(dec, g.params, prompt, greedy, 20, /*eos_id=*/-1);
  EXPECT_EQ(r.tokens.size(), 7u);  // positions 4..9 fed back, then one more chosen
  EXPECT_TRUE(r.hit_max_len);
  EXPECT_FALSE(r.hit_eos);
  EXPECT_TRUE(model::generate(dec, g.params, prompt, greedy, 0, -1).tokens.empty());
  const std::vector<int32_t> outside = {1, 96};
  EXPECT_ERROR_MENTIONS(model::generate(dec, g.params, outside, greedy, 3, -1), "outside the vocabulary");
}

// ---- (c) sampling --------------------------------------------------------------------

std::vector<float> random_logits(int64_t V, uint64_t seed, double scale = 3.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0.0, scale);
  std::vector<float> l(static_cast<size_t>(V));
  for (auto& x : l) x = float(n(rng));
  return l;
}

TEST(Sampling, TopK1AndTinyTopPAndTemperature0AreGreedy) {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const std::vector<float> l = random_logits(96, seed);
    const int32_t best = model::argmax(l);
    Sampler k1(SamplingOptions{.temperature = 1.3, .top_k = 1, .seed = seed});
    Sampler p0(SamplingOptions{.temperature = 0.7, .top_p = 1e-9, .seed = seed});
    Sampler t0(SamplingOptions{.temperature = 0, .top_k = 10, .top_p = 0.5, .seed = seed});
    for (uint64_t i = 0; i < 20; ++i) {
      EXPECT_EQ(k1.sample(l, i), best);
      EXPECT_EQ(p0.sample(l, i), best);
      EXPECT_EQ(t0.sample(l, i), best);
    }
  }
  // Equal maxima: the lowest id, as torch.argmax.
  EXPECT_EQ(model::argmax(std::vector<float>{0.f, 2.f, 1.f, 2.f}), 1);
}

// A tiny temperature once made every probability NaN (generate --temperature 1e-30 printed
// the last vocabulary piece over and over: exp of l / t - max / t, computed with a contracted
// multiply-add, is off by about 1e15 there and overflows; at 1e-310, a subnormal, 1 / t is
// inf outright). Below kGreedyBelow a temperature is greedy.
TEST(Sampling, ATinyTemperatureIsGreedyNeverNaN) {
  for (const double t : {1e-7, 1e-30, 1e-310}) {
    SCOPED_TRACE(t);
    Sampler s(SamplingOptions{.temperature = t, .seed = 5});
    EXPECT_TRUE(s.greedy());
    EXPECT_NE(s.options().summary().find("greedy (temperature"), std::string::npos) << s.options().summary();
    for (uint64_t seed = 0; seed < 20; ++seed) {
      const std::vector<float> l = random_logits(96, seed);
      EXPECT_EQ(s.sample(l, seed), model::argmax(l));
      const std::vector<double> d = s.distribution(l);
      EXPECT_EQ(d[size_t(model::argmax(l))], 1.0);
    }
  }
  // Just above the threshold it still samples, from finite probabilities summing to 1.
  Sampler s(SamplingOptions{.temperature = 2 * model::kGreedyBelow, .seed = 5});
  EXPECT_FALSE(s.greedy());
  const std::vector<double> d = s.distribution(random_logits(96, 1));
  double sum = 0;
  for (const double p : d) {
    EXPECT_TRUE(std::isfinite(p));
    sum += p;
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
}

TEST(Sampling, SameSeedSameDrawsOtherSeedOtherDraws) {
  const std::vector<float> flat(1000, 0.0f);
  auto draws = [&](uint64_t seed, uint64_t stream) {
    Sampler s(SamplingOptions{.temperature = 1.0, .seed = seed}, stream);
    std::vector<int32_t> out;
    for (uint64_t i = 0; i < 200; ++i) out.push_back(s.sample(flat, i));
    return out;
  };
  const auto a = draws(7, 0);
  EXPECT_EQ(a, draws(7, 0));
  for (const auto& other : {draws(8, 0), draws(7, 1)}) {
    int differ = 0;
    for (size_t i = 0; i < a.size(); ++i) differ += a[i] != other[i];
    EXPECT_GT(differ, 190);  // two independent uniform draws over 1000 ids agree 1 time in 1000
  }
  // Counter-based: draw i depends on i alone, not on the draws before it.
  Sampler s(SamplingOptions{.temperature = 1.0, .seed = 7});
  EXPECT_EQ(s.sample(flat, 150), a[150]);
  EXPECT_EQ(s.sample(flat, 3), a[3]);
  // Over a flat row every id is as likely: 200 draws cover many distinct ids.
  EXPECT_GT(std::set<int32_t>(a.begin(), a.end()).size(), 150u);
}

// Draws n tokens and returns each id's frequency.
std::map<int32_t, double> frequencies(Sampler& s, const std::vector<float>& logits, int n) {
  std::map<int32_t, double> f;
  for (int i = 0; i < n; ++i) f[s.sample(logits, uint64_t(i))] += 1.0 / n;
  return f;
}

TEST(Sampling, TopKNeverLeavesTheTopKAndFollowsTheirSoftmax) {
  const std::vector<float> l = random_logits(64, 99, 1.0);  // distinct values, no ties
  const int64_t k = 5;
  std::vector<int32_t> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[size_t(a)] > l[size_t(b)]; });
  const std::set<int32_t> top(order.begin(), order.begin() + k);
  const double temperature = 0.9;
  double z = 0;
  for (int32_t id : top) z += std::exp(l[size_t(id)] / temperature);

  Sampler s(SamplingOptions{.temperature = temperature, .top_k = k, .seed = 3});
  const int n = 40000;
  const auto f = frequencies(s, l, n);
  for (const auto& [id, freq] : f) EXPECT_TRUE(top.count(id)) << "token " << id << " is outside the top " << k;
  for (int32_t id : top) {
    const double p = std::exp(l[size_t(id)] / temperature) / z;
    const double sigma = std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(f.count(id) ? f.at(id) : 0.0, p, 5 * sigma) << "token " << id;
  }
  const std::vector<double> d = s.distribution(l);
  for (size_t i = 0; i < d.size(); ++i) EXPECT_EQ(d[i] > 0, top.count(int32_t(i)) == 1) << i;
}

TEST(Sampling, TopPKeepsTheNucleusOnly) {
  // Probabilities 0.5, 0.3, 0.15, 0.05 at temperature 1 (ids shuffled so order != id).
  const std::vector<float> l = {float(std::log(0.15)), float(std::log(0.5)), float(std::log(0.05)),
                                float(std::log(0.3))};
  struct Case {
    double top_p;
    std::vector<double> expect;  // renormalised nucleus, by id
  };
  // Token i is kept while the mass before it is < top_p (HF's TopPLogitsWarper).
  for (const Case& c : {Case{0.4, {0, 1, 0, 0}}, Case{0.7, {0, 0.625, 0, 0.375}},
                        Case{0.9, {0.15 / 0.95, 0.5 / 0.95, 0, 0.3 / 0.95}}, Case{1.0, {0.15, 0.5, 0.05, 0.3}}}) {
    Sampler s(SamplingOptions{.temperature = 1.0, .top_p = c.top_p, .seed = 11});
    const std::vector<double> d = s.distribution(l);
    for (size_t i = 0; i < d.size(); ++i) EXPECT_NEAR(d[i], c.expect[i], 1e-6) << "top_p " << c.top_p << " id " << i;
    const int n = 20000;
    const auto f = frequencies(s, l, n);
    for (size_t i = 0; i < d.size(); ++i) {
      const double p = c.expect[i];
      if (p == 0) {
        EXPECT_EQ(f.count(int32_t(i)), 0u) << "top_p " << c.top_p << " drew id " << i << " outside the nucleus";
      } else {
        EXPECT_NEAR(f.count(int32_t(i)) ? f.at(int32_t(i)) : 0.0, p, 5 * std::sqrt(p * (1 - p) / n) + 1e-9);
      }
    }
  }
}

TEST(Sampling, TopKKeepsTiesAtTheBoundaryAsTransformers) {
  Sampler s(SamplingOptions{.temperature = 1.0, .top_k = 2});
  const std::vector<double> d = s.distribution(std::vector<float>{3.f, 1.f, 1.f, 0.f});
  EXPECT_GT(d[1], 0);
  EXPECT_GT(d[2], 0);
  EXPECT_EQ(d[3], 0);
}

TEST(Sampling, RefusesBadOptionsAndNonFiniteLogits) {
  EXPECT_ERROR_MENTIONS(Sampler(SamplingOptions{.temperature = -1}), "temperature");
  EXPECT_ERROR_MENTIONS(Sampler(SamplingOptions{.top_k = -2}), "top_k");
  EXPECT_ERROR_MENTIONS(Sampler(SamplingOptions{.top_p = 0}), "top_p");
  EXPECT_ERROR_MENTIONS(Sampler(SamplingOptions{.top_p = 1.5}), "top_p");
  Sampler s(SamplingOptions{});
  EXPECT_ERROR_MENTIONS(s.sample(std::vector<float>{0.f, NAN, 1.f}, 0), "not finite");
  EXPECT_ERROR_MENTIONS(s.sample(std::vector<float>{0.f, INFINITY}, 0), "not finite");
}

// ---- (d) fsdp_train generate -----------------------------------------------------------

struct CliRun {
  int code = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Whether `--device cuda` would find a real GPU here (then the no-GPU error case is moot).
bool gpu_visible() {
#if defined(FSDP_WITH_CUDA)
  return cuda::real_gpu_visible();
#else
  return false;
#endif
}

class GenerateCli : public ::testing::Test {
 protected:
  static inline fs::path root;
  static inline std::string spm96, spm64;

  // Two sentencepiece models trained on made-up words: one with the golden model's 96 pieces,
  // one with 64 (the vocabulary mismatch).
  static void SetUpTestSuite() {
    root = fs::temp_directory_path() / ("fsdp_generate_test_" + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::create_directories(root);
    spm96 = test::made_up_tokenizer(root, 96);
    spm64 = test::made_up_tokenizer(root, 64);
  }
  static void TearDownTestSuite() { fs::remove_all(root); }

  static CliRun run(const std::string& args) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const fs::path out = root / (std::string(info->name()) + ".out"), err = root / (std::string(info->name()) + ".err");
    const std::string cmd = std::string(FSDP_TRAIN_BIN) + " generate " + args + " > " + out.string() + " 2> " +
                            err.string();
    const int status = std::system(cmd.c_str());
    CliRun r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

  static std::string model_flags(const std::string& tokenizer) {
    return "--checkpoint " + golden_dir() + " --tokenizer " + tokenizer;
  }
};

TEST_F(GenerateCli, UsageErrorsExit2NamingTheFlag) {
  struct Case {
    std::string args, mention;
  };
  const std::string m = model_flags(spm96);
  const std::string missing = (root / "no_such_model").string();
  // What is not there is the command line's error (issue 31: exit 1 before): the checkpoint, the
  // tokenizer, and no tokenizer at all for a folder that names none.
  for (const Case& c : {Case{"", "--checkpoint"}, Case{"--checkpoint " + golden_dir() + " --prompt hi", "--tokenizer"},
                        Case{"--checkpoint " + missing + " --tokenizer " + spm96 + " --prompt hi",
                             "--checkpoint " + missing + ": no such checkpoint or folder"},
                        Case{model_flags(missing + ".model") + " --prompt hi", "--tokenizer " + missing + ".model: no such file"},
                        Case{m, "--prompt"}, Case{m + " --prompt hi --temperature warm", "--temperature"},
                        Case{m + " --prompt hi --temperature -1", "--temperature"},
                        Case{m + " --prompt hi --top-p 1.5", "--top-p"}, Case{m + " --prompt hi --top-k 2.5", "--top-k"},
                        Case{m + " --prompt hi --max-new-tokens -3", "--max-new-tokens"},
                        Case{m + " --prompt hi --seed -1", "--seed"}, Case{m + " --prompt hi --bogus", "'--bogus'"},
                        Case{m + " --prompt", "--prompt needs a value"}, Case{m + " --prompt hi --device tpu", "--device"},
                        Case{m + " --prompt hi --dtype float8", "--dtype"},
                        Case{m + " --prompt hi --device cpu --dtype bfloat16", "--dtype bfloat16 needs --device cuda"}}) {
    const CliRun r = run(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.mention), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(r.out, "") << c.args;
  }
  const CliRun h = run("--help");
  EXPECT_EQ(h.code, 0);
  EXPECT_NE(h.out.find("--top-p"), std::string::npos);
}

TEST_F(GenerateCli, RuntimeErrorsExit1NamingTheFileOrFlag) {
  struct Case {
    std::string args;
    std::vector<std::string> mentions;
  };
  const std::string long_prompt = "\"" + std::string(200, 'k') + "\"";  // > 64 tokens
  for (const Case& c : {Case{"--checkpoint " + root.string() + " --tokenizer " + spm96 + " --prompt hi",
                             {"--checkpoint", "config.json"}},
                        Case{model_flags(spm64) + " --prompt hi", {"--tokenizer", spm64, "64", "96"}},
                        Case{model_flags(spm96) + " --prompt " + long_prompt, {"--prompt", "64"}},
                        // This machine has no GPU (the CPU test binary never runs on one with a GPU
                        // visible to --device cuda: see the skip below).
                        Case{model_flags(spm96) + " --prompt hi --device cuda", {"--device cuda"}}}) {
    if (c.args.find("--device cuda") != std::string::npos && gpu_visible()) continue;
    const CliRun r = run(c.args);
    EXPECT_EQ(r.code, 1) << c.args << "\n" << r.err;
    for (const std::string& m : c.mentions) EXPECT_NE(r.err.find(m), std::string::npos) << m << " in\n" << r.err;
  }
}

TEST_F(GenerateCli, PrintsThePromptAndItsCompletion) {
  const std::string prompt = "kalo mine rusa";
  const CliRun r = run(model_flags(spm96) + " --prompt \"" + prompt + "\" --temperature 0 --max-new-tokens 12");
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_TRUE(r.out.starts_with(prompt)) << r.out;
  EXPECT_GT(r.out.size(), prompt.size() + 1) << "no completion: " << r.out;
  EXPECT_TRUE(r.out.ends_with("\n"));
  EXPECT_NE(r.err.find("generated"), std::string::npos) << r.err;  // the log goes to stderr
  EXPECT_EQ(r.out.find("generated"), std::string::npos) << r.out;
  // Sampling is seeded: the same seed prints the same text.
  const std::string sampled = model_flags(spm96) + " --prompt \"" + prompt + "\" --top-k 20 --top-p 0.95 --seed 9";
  const CliRun a = run(sampled), b = run(sampled);
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_TRUE(a.out.starts_with(prompt));
}

TEST_F(GenerateCli, LoadsAnFsdpTrainCheckpoint) {
  // Two training steps of the tiny preset with the tokenizer's 96-piece vocabulary write
  // <run.dir>/checkpoints/step_2 at the end of the run.
  const fs::path run_dir = root / "run";
  const std::string train = std::string(FSDP_TRAIN_BIN) + " train --config " + test::source_path("configs/tiny.yaml") +
                            " --set data.source=synthetic --set model.vocab_size=96 --set train.max_steps=2" +
                            " --set train.seq_len=32 --set train.micro_batch_size=2 --set train.grad_accum_steps=1" +
                            " --set train.eval_every=0 --set run.dir=" + run_dir.string() + " > " +
                            (root / "train.log").string() + " 2>&1";
  ASSERT_EQ(std::system(train.c_str()), 0) << slurp(root / "train.log");
  const fs::path step = run_dir / "checkpoints" / "step_2";
  ASSERT_TRUE(fs::exists(step / "manifest.json"));

  const std::string rest = " --tokenizer " + spm96 + " --prompt \"kalo mine\" --temperature 0 --max-new-tokens 8";
  const CliRun by_step = run("--checkpoint " + step.string() + rest);
  ASSERT_EQ(by_step.code, 0) << by_step.err;
  EXPECT_TRUE(by_step.out.starts_with("kalo mine")) << by_step.out;
  EXPECT_NE(by_step.err.find("fsdp_train checkpoint"), std::string::npos) << by_step.err;
  // A checkpoint.dir stands for its newest complete checkpoint: the same weights, the same text.
  const CliRun by_dir = run("--checkpoint " + (run_dir / "checkpoints").string() + rest);
  ASSERT_EQ(by_dir.code, 0) << by_dir.err;
  EXPECT_EQ(by_dir.out, by_step.out);

  // A damaged shard is refused by name, not generated from.
  const fs::path shard = step / "rank_00000.safetensors";
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-4, std::ios::end);
    f.write("\xde\xad\xbe\xef", 4);
  }
  const CliRun broken = run("--checkpoint " + step.string() + rest);
  EXPECT_EQ(broken.code, 1);
  EXPECT_NE(broken.err.find("rank_00000.safetensors"), std::string::npos) << broken.err;
  EXPECT_EQ(broken.out, "");
}

}  // namespace
}  // namespace fsdp
