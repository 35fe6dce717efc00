// A single-process Trainer (one rank, no MPI) and the small checkpointing config the
// checkpoint and run-ownership tests share, each test in a fresh scratch directory.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "fsdp/config/config.h"
#include "fsdp/dist/communicator.h"
#include "fsdp/train/trainer.h"

namespace fsdp::test {

struct LocalTrainer {
  explicit LocalTrainer(const config::Config& cfg, train::TrainerPurpose purpose = train::TrainerPurpose::Train)
      : groups(dist::local_process_groups()), trainer(cfg, groups, purpose) {}
  train::Trainer* operator->() { return &trainer; }
  dist::ProcessGroups groups;
  train::Trainer trainer;
};

// A fresh, empty directory <tmp>/fsdp_ckpt_test_<name>.
inline std::string scratch(const std::string& name) {
  const std::filesystem::path p = std::filesystem::temp_directory_path() / ("fsdp_ckpt_test_" + name);
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

// A 2-layer tiny Llama on the synthetic source, 8 steps, run.dir `dir`, no metrics.
inline config::Config ckpt_config(const std::string& dir, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> o = {"model.preset=tiny",        "model.num_layers=2",   "model.hidden_size=64",
                                "model.intermediate_size=96", "model.num_heads=4",  "model.num_kv_heads=2",
                                "model.vocab_size=256",      "train.seq_len=16",     "train.micro_batch_size=2",
                                "train.max_steps=8",         "optim.warmup_steps=2", "logging.metrics=false",
                                "run.dir=" + dir,            "checkpoint.keep_last=10"};
  o.insert(o.end(), extra.begin(), extra.end());
  return config::load_config_string("data:\n  source: synthetic\n", "test", o);
}

}  // namespace fsdp::test
