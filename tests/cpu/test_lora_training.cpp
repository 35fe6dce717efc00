// LoRA training in one process: dropout's masks are drawn again, bit for bit, when
// activation checkpointing recomputes a block inside its backward (full every 1 and 2
// blocks, selective, and both with activation offloading; dense and NF4 bases): the same
// losses, adapter gradients and adapters as keeping every activation. Dropout is on in
// training and off in evaluation, and the log says what trains.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "fsdp/train/trainer.h"
#include "test_util.h"

namespace fsdp {
namespace {

config::Config lora_tiny(const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"model.preset=tiny",       "model.num_layers=3",     "train.seq_len=24",
                                "train.micro_batch_size=2", "train.grad_accum_steps=2", "optim.lr=1e-2",
                                "logging.metrics=false",   "checkpoint.resume=none", "run.dir=/tmp/fsdp_lora_training",
                                "lora.enabled=true",        "lora.rank=4",            "lora.targets=all-linear",
                                "lora.dropout=0.25"};
  o.insert(o.end(), extra.begin(), extra.end());
  return config::load_config_string("data:\n  source: synthetic\n", "test", o);
}

struct Trained {
  std::vector<double> losses;
  std::vector<Tensor> adapters, grads;  // per unit: the adapters after the last step, its gradient
};

Trained train(const config::Config& cfg, int steps) {
  auto groups = dist::local_process_groups();
  train::Trainer t(cfg, groups);
  Trained r;
  for (int i = 0; i < steps; ++i) r.losses.push_back(t.train_step().loss);
  for (int u = 0; u < t.engine().num_units(); ++u) {
    r.adapters.push_back(t.engine().gather_full(u).clone());
    r.grads.push_back(t.engine().grad_shard(u).clone());  // one process: the whole unit's
  }
  return r;
}

TEST(LoraTraining, ActivationCheckpointingRedrawsTheSameDropoutMasks) {
  const std::vector<std::vector<std::string>> modes = {
      {"train.activation_checkpointing=full", "train.activation_checkpointing_every=1"},
      {"train.activation_checkpointing=full", "train.activation_checkpointing_every=2"},
      {"train.activation_checkpointing=selective"},
      {"train.activation_checkpointing=full", "train.activation_offload=true"},
      {"train.activation_checkpointing=selective", "train.activation_offload=true",
       "train.activation_offload_horizon=1"},
  };
  for (const char* quant : {"none", "nf4"}) {
    const std::string q = std::string("model.quantization=") + quant;
    const Trained plain = train(lora_tiny({q}), 3);
    for (const std::vector<std::string>& mode : modes) {
      std::vector<std::string> o = mode;
      o.push_back(q);
      const Trained ac = train(lora_tiny(o), 3);
      const std::string name = std::string(quant) + " " + mode[0] + (mode.size() > 1 ? " " + mode[1] : "");
      EXPECT_EQ(ac.losses, plain.losses) << name;
      for (size_t u = 0; u < plain.adapters.size(); ++u) {
        EXPECT_TRUE(test::same_bits(ac.grads[u], plain.grads[u])) << name << " unit " << u;
        EXPECT_TRUE(test::same_bits(ac.adapters[u], plain.adapters[u])) << name << " unit " << u;
      }
    }
  }
}

// Dropout acts in training (another rate, another curve) and not in evaluation: the same
// trained adapters resumed under another lora.dropout evaluate to the same bits.
TEST(LoraTraining, DropoutTrainsButDoesNotEvaluate) {
  const Trained a = train(lora_tiny({"lora.dropout=0.25"}), 2), b = train(lora_tiny({"lora.dropout=0.0"}), 2);
  EXPECT_EQ(a.losses[0], b.losses[0]);  // B = 0 at the start: dropout cannot show yet
  EXPECT_NE(a.losses[1], b.losses[1]);
  const std::string dir = "/tmp/fsdp_lora_dropout_eval";
  std::filesystem::remove_all(dir);
  auto groups = dist::local_process_groups();
  double with_dropout = 0;
  {
    train::Trainer x(lora_tiny({"lora.dropout=0.5", "run.dir=" + dir}), groups);
    x.train_step();
    x.save_checkpoint();
    x.finish_checkpoint();
    with_dropout = x.evaluate(2);
  }
  train::Trainer y(lora_tiny({"lora.dropout=0.0", "run.dir=" + dir, "checkpoint.resume=auto"}), groups);
  ASSERT_EQ(y.step(), 1);
  EXPECT_EQ(y.evaluate(2), with_dropout);
}

}  // namespace
}  // namespace fsdp
