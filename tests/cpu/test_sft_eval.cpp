// `fsdp_train eval` on an SFT split (issue 30 item 4): the loss it prints is the sum of the
// per-token losses over the trained targets (the assistant's answers) divided by their number,
// computed here by hand from the model's logits on each example alone (log-softmax in double,
// the examples' ids and masks from transformers: tests/golden/sft/expected.json), and it is
// not the all-token mean. eval.batches: 0 reads every example once: 5 examples at micro-batch
// 2 need 3 steps, the last one's second row (the loader wrapping round to the first example)
// left out.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "fsdp/model/decoder.h"
#include "fsdp/ops/cross_entropy.h"
#include "fsdp/train/inference_model.h"
#include "test_util.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The tiny Llama 3-style model of the chat golden: its vocabulary is llama3_chat's.
std::string model_dir() { return test::source_path("tests/golden/chat_generate/llama3_chat_tiny"); }

struct Example {
  std::vector<int32_t> ids;
  std::vector<int> mask;  // 1 = the token is trained (as a target)
};

// The examples `prepare --tokenizer tokenizers/llama3_chat` makes of messages.jsonl and
// alpaca.jsonl, as transformers tokenized and masked them.
std::vector<Example> golden_examples() {
  std::ifstream in(test::source_path("tests/golden/sft/expected.json"));
  const json j = json::parse(in);
  std::vector<Example> out;
  for (const json& c : j["cases"]) {
    if (c["model"] != "tokenizers/llama3_chat" || !c["flags"].empty()) continue;
    for (const json& e : c["examples"]) out.push_back({e["ids"].get<std::vector<int32_t>>(), e["mask"].get<std::vector<int>>()});
  }
  return out;
}

struct Losses {
  double trained = 0, all = 0;
  int64_t trained_count = 0;
};

// Each example alone through the model; target t + 1 of logits row t, trained when its mask is.
Losses hand_computed(const std::vector<Example>& examples) {
  train::InferenceModel m = train::load_inference_model(model_dir(), "");
  model::Llama llama(m.config);
  double trained = 0, all = 0;
  int64_t n_trained = 0, n_all = 0;
  for (const Example& e : examples) {
    const int64_t T = int64_t(e.ids.size()), V = m.config.vocab_size;
    model::LlamaActivations act(m.config, 1, T, DType::F32, Device::cpu());
    for (int64_t t = 0; t < T; ++t) {
      act.ids.set({t}, e.ids[size_t(t)]);
      act.targets.set({t}, double(kIgnoreIndex));
    }
    llama.forward(act, *m.params);
    for (int64_t t = 0; t + 1 < T; ++t) {
      const float* row = act.logits.data<float>() + t * V;
      double top = row[0];
      for (int64_t v = 1; v < V; ++v) top = std::max(top, double(row[v]));
      double z = 0;
      for (int64_t v = 0; v < V; ++v) z += std::exp(double(row[v]) - top);
      const double loss = top + std::log(z) - double(row[e.ids[size_t(t + 1)]]);
      all += loss;
      ++n_all;
      if (e.mask[size_t(t + 1)] != 0) {
        trained += loss;
        ++n_trained;
      }
    }
  }
  return {trained / double(n_trained), all / double(n_all), n_trained};
}

struct CommandRun {
  int code = -1;
  std::string out;
};

CommandRun run(const std::string& args, const fs::path& log) {
  const int status = std::system((std::string(FSDP_TRAIN_BIN) + " " + args + " 2> " + log.string() + ".err > " +
                                  log.string()).c_str());
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ss.str()};
}

// The value of the stdout line "<key> <value>".
double value_of(const std::string& out, const std::string& key) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    if (line.starts_with(key + " ")) return std::stod(line.substr(key.size() + 1));
  ADD_FAILURE() << key << " not in:\n" << out;
  return NAN;
}

TEST(SftEval, LossIsOverTrainedTokensOfEveryExampleOnce) {
  const fs::path dir = fs::temp_directory_path() / ("fsdp_sft_eval_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string sft = test::source_path("tests/golden/sft/");
  const CommandRun prep = run("prepare --tokenizer " + test::source_path("tests/golden/tokenizers/llama3_chat") + " --output " +
                           (dir / "shards").string() + " --val-fraction 0 " + sft + "messages.jsonl " + sft + "alpaca.jsonl",
                       dir / "prepare.log");
  ASSERT_EQ(prep.code, 0) << prep.out;
  const std::vector<Example> examples = golden_examples();
  ASSERT_EQ(examples.size(), 5u);
  const Losses want = hand_computed(examples);

  const std::string eval = "eval --config " + test::source_path("configs/tiny.yaml") + " --set model.init_from=" +
                           model_dir() + " --set data.path=" + (dir / "shards").string() +
                           " --set eval.split=train --set eval.batches=0 --set train.seq_len=64"
                           " --set train.micro_batch_size=2 --set checkpoint.resume=none --set run.dir=" +
                           (dir / "run").string();
  const CommandRun one_per_row = run(eval + " --set data.packing=false", dir / "rows.log");
  ASSERT_EQ(one_per_row.code, 0) << one_per_row.out;
  const double loss = value_of(one_per_row.out, "eval_loss");
  // float32 logits against the double log-softmax of the same logits: ~1e-7 relative.
  EXPECT_NEAR(loss, want.trained, 1e-5 * want.trained) << "all-token mean " << want.all;
  EXPECT_EQ(int64_t(value_of(one_per_row.out, "eval_trained_tokens")), want.trained_count);
  // The prompts are most of the tokens, and they score differently.
  EXPECT_GT(std::abs(want.all - want.trained), 1e-2) << want.all << " vs " << want.trained;
  // eval_loss stays the last line (scripts read it so).
  EXPECT_TRUE(one_per_row.out.substr(one_per_row.out.rfind('\n', one_per_row.out.size() - 2) + 1).starts_with("eval_loss "))
      << one_per_row.out;

  // Packed, the same examples and masks, so the same trained targets; and since the examples
  // of a window never see each other (Note [Document masking]), the same loss.
  const CommandRun packed = run(eval + " --set data.packing=true", dir / "packed.log");
  ASSERT_EQ(packed.code, 0) << packed.out;
  EXPECT_EQ(int64_t(value_of(packed.out, "eval_trained_tokens")), want.trained_count);
  EXPECT_NEAR(value_of(packed.out, "eval_loss"), want.trained, 1e-5 * want.trained);

  // A fixed number of batches wraps round the split: batches x micro-batch rows, repeats counted.
  const CommandRun three = run(eval + " --set data.packing=false --set eval.batches=3", dir / "three.log");
  ASSERT_EQ(three.code, 0) << three.out;
  EXPECT_GT(int64_t(value_of(three.out, "eval_trained_tokens")), want.trained_count);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fsdp
