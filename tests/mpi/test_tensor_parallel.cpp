// Tensor parallelism through the trainer, FSDP on top (issue 27's "Done means"), under
// mpiexec with 2 and 4 ranks (skipped where the world cannot hold the layout; np1 has
// none): dense Llama, GQA and MHA, tied and untied, trains 20 steps at
//   T=2 on one process group (2 ranks: mesh 1x1x2; 4 ranks: T=2 x FULL_SHARD 2, 1x2x2),
//   T=4 (4 ranks: 1x1x4), T=2 x HYBRID_SHARD (4 ranks: 2x1x2, the replicate all-reduce),
// under every activation checkpointing mode (none, full, selective, full with offloading),
// and equals one process training the same global batch: every step's loss within 1e-5
// relative, every weight after 20 steps within 1e-5 norm-wise (per parameter, its tensor
// slices stacked in rank order), the same run twice bit for bit, and every checkpointing
// mode the same bits as none. Per step, the bytes each rank sends equal the theory of
// (FSDP, T) to the byte (FsdpVolume's for the shard group over this rank's slices, plus
// the sequence-parallel collectives, the vocabulary-parallel cross-entropy, the whole
// slots' gradient all-reduce and the two-level grad norm).
//
// Tolerances as tests/mpi/test_fsdp.cpp's: losses 1e-5 relative per step (the issue's
// bound); a tensor group sums each row-parallel output and each whole slot's gradient in
// another order than one process (~1e-7 relative per step). Final parameters: the issue's
// 1e-5 norm-wise per parameter, with Adam's eps at 1e-5 (tiny() below): Adam divides by
// sqrt(v) + eps, so at the default 1e-8 a rare token's embedding row, whose gradient nearly
// cancels, moves by up to lr for a 1e-7 change (measured 1.1e-5 of tok_embeddings' norm at
// T=2, GQA, untied, against FsdpEquivalence's 5e-5 bound); eps 1e-5 damps exactly those
// elements, while a wrong slice, a missing reduction or a skipped update still shows at 1e-2
// or more.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "../common/distributed_train_checks.h"
#include "../common/tensor_parallel_checks.h"
#include "fsdp/ckpt/safetensors.h"
#include "fsdp/fsdp/tensor_group.h"
#include "fsdp/train/launch_checks.h"
#include "fsdp/train/step_votes.h"
#include "fsdp/train/trainer.h"
#include "mpi_test_env.h"

namespace fsdp {
namespace {

constexpr int kSteps = 20;
constexpr double kTolerance = 1e-5;
constexpr double kParamTolerance = 1e-5;

// 8 heads of 16, 4 key/value heads (GQA 2), or 4 of 32 (MHA); MLP 96; vocabulary 128:
// everything divides by 4.
std::vector<std::string> model_keys(bool gqa, bool tied) {
  return {"model.preset=tiny",
          "model.num_layers=2",
          "model.vocab_size=128",
          "model.hidden_size=128",
          std::string("model.num_heads=") + (gqa ? "8" : "4"),
          "model.num_kv_heads=4",
          "model.intermediate_size=96",
          std::string("model.tie_word_embeddings=") + (tied ? "true" : "false")};
}

config::Config tiny(const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"train.seq_len=16",     "train.micro_batch_size=2", "optim.lr=3e-3", "optim.eps=1e-5",
                                "optim.warmup_steps=3", "train.max_steps=20",       "logging.metrics=false",
                                "checkpoint.resume=none"};
  o.insert(o.end(), extra.begin(), extra.end());
  return config::load_config_string("data:\n  source: synthetic\n", "test", o);
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct Run {
  std::vector<double> losses;
  std::vector<uint64_t> comm_bytes;
  std::map<std::string, Tensor> weights;  // every parameter, whole
};

Run train(const config::Config& cfg, dist::ProcessGroups& groups, int steps = kSteps) {
  train::Trainer t(cfg, groups);
  Run r;
  for (int i = 0; i < steps; ++i) {
    const auto m = t.train_step();
    r.losses.push_back(m.loss);
    r.comm_bytes.push_back(m.comm_bytes);
  }
  CommTensorGroup tensor(*groups.tensor);
  for (int u = 0; u < t.engine().num_units(); ++u) {
    const Tensor local = t.engine().gather_full(u).clone();
    for (const model::ParamSlot& s : t.model().units()[size_t(u)].params)
      r.weights[s.name] = test::whole_parameter(s, local, groups.tensor->size() > 1 ? &tensor : nullptr);
  }
  return r;
}

// One process over the same global batch (the data-parallel ranks' micro-batches become
// accumulation steps), cached per model.
const Run& reference(const std::vector<std::string>& model, int data_ranks, int accum) {
  // Never destroyed: its tensors would outlive the allocators they came from at exit.
  static auto& cache = *new std::map<std::string, Run>;
  std::string key = std::to_string(data_ranks * accum);
  for (const std::string& k : model) key += " " + k;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  auto local = dist::local_process_groups();
  std::vector<std::string> o = model;
  o.push_back("train.grad_accum_steps=" + std::to_string(accum * data_ranks));
  o.push_back("fsdp.sharding_strategy=NO_SHARD");
  return cache.emplace(key, train(tiny(o), local)).first->second;
}

struct Layout {
  int tensor;
  std::string strategy;
  int shard_group_size = 0;  // HYBRID_SHARD
};

bool fits(const Layout& l) {
  const int n = test::world_groups().world->size();
  return l.tensor > 1 && n % l.tensor == 0 && (l.shard_group_size == 0 || (n / l.tensor) % l.shard_group_size == 0) &&
         !(l.strategy == "HYBRID_SHARD" && n / l.tensor < 2);
}

std::vector<std::string> layout_keys(const Layout& l) {
  std::vector<std::string> o = {"parallel.tensor=" + std::to_string(l.tensor), "fsdp.sharding_strategy=" + l.strategy};
  if (l.shard_group_size > 0) o.push_back("fsdp.shard_group_size=" + std::to_string(l.shard_group_size));
  return o;
}

const std::vector<std::vector<std::string>> kCheckpointing = {
    {},
    {"train.activation_checkpointing=full"},
    {"train.activation_checkpointing=selective", "train.activation_checkpointing_every=2"},
    {"train.activation_checkpointing=full", "train.activation_offload=true", "train.activation_offload_horizon=1"},
};

// `both`: keys for this run and its one-process reference alike.
void expect_equivalent(const Layout& l, bool gqa, bool tied, int accum = 1, const std::vector<std::string>& both = {}) {
  if (!fits(l)) GTEST_SKIP() << "needs a world the layout divides";
  dist::ProcessGroups& world = test::world_groups();
  std::vector<std::string> model = model_keys(gqa, tied);
  model.insert(model.end(), both.begin(), both.end());
  std::vector<std::string> o = model;
  for (const std::string& k : layout_keys(l)) o.push_back(k);
  o.push_back("train.grad_accum_steps=" + std::to_string(accum));
  const config::Config base = tiny(o);
  auto groups = dist::split_process_groups(world, train::mesh_spec(base));
  const Run& want = reference(model, groups.mesh.data_parallel_size(), accum);
  const Run got = train(base, groups);
  for (int i = 0; i < kSteps; ++i) {
    EXPECT_LT(std::abs(got.losses[size_t(i)] - want.losses[size_t(i)]) / want.losses[size_t(i)], kTolerance)
        << "step " << i + 1 << ": " << got.losses[size_t(i)] << " vs " << want.losses[size_t(i)];
  }
  for (const auto& [name, w] : want.weights) {
    ASSERT_TRUE(got.weights.count(name)) << name;
    EXPECT_LT(test::rel_norm_error(got.weights.at(name), w), kParamTolerance) << name;
  }
  // Twice, and every checkpointing mode: the same bits.
  for (const std::vector<std::string>& mode : kCheckpointing) {
    std::vector<std::string> om = o;
    om.insert(om.end(), mode.begin(), mode.end());
    const Run again = train(tiny(om), groups);
    const std::string what = mode.empty() ? "the same run twice" : mode.back();
    for (int i = 0; i < kSteps; ++i) EXPECT_EQ(again.losses[size_t(i)], got.losses[size_t(i)]) << what << " step " << i + 1;
    for (const auto& [name, w] : got.weights)
      EXPECT_EQ(std::memcmp(again.weights.at(name).data_ptr(), w.data_ptr(), w.nbytes()), 0) << what << ": " << name;
  }
}

TEST(TensorParallel, T2GqaUntied) { expect_equivalent({2, "FULL_SHARD"}, true, false); }
TEST(TensorParallel, T2GqaTied) { expect_equivalent({2, "FULL_SHARD"}, true, true); }
TEST(TensorParallel, T2MhaUntied) { expect_equivalent({2, "FULL_SHARD"}, false, false); }
TEST(TensorParallel, T2MhaTiedWithAccumulation) { expect_equivalent({2, "FULL_SHARD"}, false, true, 2); }
TEST(TensorParallel, T4GqaUntied) { expect_equivalent({4, "FULL_SHARD"}, true, false); }
TEST(TensorParallel, T4MhaTied) { expect_equivalent({4, "FULL_SHARD"}, false, true); }
TEST(TensorParallel, T2HybridShardGqaTied) { expect_equivalent({2, "HYBRID_SHARD", 1}, true, true); }
// Without clipping: at this global batch (4 micro-batches of the MHA untied model) step 4
// brings elements whose gradient nearly cancels under Adam's epsilon, where rounding noise
// is amplified (see the tolerances above): with train.grad_clip 1 the one-process run and
// FSDP alone (T=1, 4 ranks) part by 1.5e-7 there and T=2 by 1e-6, reaching 3e-5 at step
// 17, while without clipping T=2 stays within 1e-7 of one process for all 20 steps. The
// other layouts keep the default clipping (grad norm over both mesh dimensions).
TEST(TensorParallel, T2HybridShardMhaUntiedWithAccumulation) {
  expect_equivalent({2, "HYBRID_SHARD", 1}, false, false, 2, {"train.grad_clip=0"});
}
TEST(TensorParallel, T2ShardGradOpGqaUntied) { expect_equivalent({2, "SHARD_GRAD_OP"}, true, false); }

// model.init_from at T=2: each tensor rank reads its slices of the Hugging Face tensors
// (ckpt/hf_import.cpp, a row or a whole slice at a time), so the loaded weights are one
// process's to the bit, and 20 steps follow one process's curve. llama_gqa_tiny: 6 heads,
// 2 key/value heads, MLP 88, vocabulary 96.
TEST(TensorParallel, InitFromAHuggingFaceFolderEqualsOneProcess) {
  const Layout l{2, "FULL_SHARD"};
  if (!fits(l)) GTEST_SKIP() << "needs a world the layout divides";
  const std::string dir = std::string(FSDP_SOURCE_DIR) + "/tests/golden/llama_gqa_tiny";
  const std::vector<std::string> model = {"model.init_from=" + dir};
  std::vector<std::string> o = model;
  for (const std::string& k : layout_keys(l)) o.push_back(k);
  const config::Config cfg = tiny(o);
  auto groups = dist::split_process_groups(test::world_groups(), train::mesh_spec(cfg));
  auto local = dist::local_process_groups();
  std::vector<std::string> one = model;
  one.push_back("fsdp.sharding_strategy=NO_SHARD");
  // fsdp::Run: inside a TEST body, Run alone is testing::Test::Run.
  const fsdp::Run loaded = train(cfg, groups, 0), loaded_once = train(tiny(one), local, 0);
  ASSERT_EQ(loaded.weights.size(), loaded_once.weights.size());
  for (const auto& [name, w] : loaded_once.weights)
    EXPECT_EQ(std::memcmp(loaded.weights.at(name).data_ptr(), w.data_ptr(), w.nbytes()), 0) << name;
  // And they are the folder's: a row-split, a column-split and a vocabulary-split tensor.
  const ckpt::SafetensorsFolder folder(dir);
  for (const auto& [ours, theirs] : {std::pair<std::string, std::string>{"layers.0.wq", "model.layers.0.self_attn.q_proj.weight"},
                                     {"layers.1.w_down", "model.layers.1.mlp.down_proj.weight"},
                                     {"tok_embeddings", "model.embed_tokens.weight"}}) {
    const std::vector<float> want = ckpt::read_as_f32(folder.entry(theirs));
    const Tensor& got = loaded.weights.at(ours);
    ASSERT_EQ(size_t(got.numel()), want.size()) << ours;
    EXPECT_EQ(std::memcmp(got.data_ptr(), want.data(), want.size() * sizeof(float)), 0) << ours;
  }
  const fsdp::Run& want = reference(model, groups.mesh.data_parallel_size(), 1);
  const fsdp::Run got = train(cfg, groups);
  for (int i = 0; i < kSteps; ++i)
    EXPECT_LT(std::abs(got.losses[size_t(i)] - want.losses[size_t(i)]) / want.losses[size_t(i)], kTolerance)
        << "step " << i + 1;
  for (const auto& [name, w] : want.weights)
    EXPECT_LT(test::rel_norm_error(got.weights.at(name), w), kParamTolerance) << name;
}

// Theoretical bytes one rank sends per step (ring volumes of communicator.h), micro-batch
// of N tokens, one micro-batch, no recompute, mesh R x S x T over W ranks, d = 4 bytes:
//   FSDP over the shard group, on this rank's slices (FsdpVolume's formula, S_u the bytes
//     of unit u's trainable shard, F_u of its frozen shard: LoRA's base, test_lora.cpp's
//     formula): FULL_SHARD and HYBRID_SHARD (S-1) (S_u + F_u) x (2 gathers; 1 for the head,
//     3 for a tied table, 1 for a frozen untied table, whose backward is skipped) + (S-1)
//     S_u reduce-scatter; SHARD_GRAD_OP and HYBRID_SHARD_ZERO2 (S-1) (S_u + F_u) + (S-1)
//     S_u; with R > 1 the replicate all-reduce 2 (R-1)/R S_u
//   the whole trainable slots' gradients over the tensor group: 2 (T-1)/T x (their
//     elements) x d (the norms; LoRA's A on a column-parallel and B on a row-parallel base;
//     Mixtral's router)
//   sequence parallelism, X = (T-1) x (N/T x C x d) per all-gather or reduce-scatter of the
//     residual stream: the embedding 2X (reduce-scatter, and its twin, which a frozen table
//     skips with its backward: X); each block 4X forward (gather, scatter for both
//     sublayers; a mixture of experts gathers the normed rows and reduce-scatters the
//     partial combine as the dense MLP does) and 6X backward (scatter's twin, the gather
//     again and its twin, for both); the head 3X (gather; gather again and its twin)
//   the vocabulary-parallel cross-entropy: one all-gather of [N, 3] doubles, (T-1) N 24
//   the grad norm: 2 (S-1)/S 8 over the shard group, 2 (T-1)/T 8 over the tensor group;
//   the loss and votes: 2 (W-1)/W 8 kSlots over the world; a mixture of experts' expert
//     counts, L x E doubles all-reduced over the world: 2 (W-1)/W 8 L E.
double expected_bytes(const train::Trainer& t, const dist::ProcessGroups& g, const config::Config& cfg) {
  const auto& units = t.model().units();
  const dist::MeshShape mesh = g.mesh.shape();
  const double S = mesh.shard, R = mesh.replicate, T = mesh.tensor, W = mesh.world_size();
  const bool tied = units.back().reads_unit == 0;
  const bool frozen_table = units.front().numel == 0;
  double total = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    // shard_range pads an empty buffer to one element per rank; an empty one sends nothing
    // (LoRA's embedding and head train nothing, a dense model freezes nothing).
    const double Su = units[u].numel == 0 ? 0 : double(shard_range(units[u].numel, int(S), 0).size) * 4;
    const double Fu = units[u].frozen_bytes == 0 ? 0 : double(shard_range(units[u].frozen_bytes, int(S), 0).size);
    int gathers = u + 1 == units.size() ? 1 : (tied && u == 0 ? 3 : 2);
    if (u == 0 && frozen_table && !tied) gathers = 1;
    if (reshards_after_forward(cfg.fsdp.sharding_strategy)) total += (S - 1) * (Su + Fu) * gathers + (S - 1) * Su;
    else total += (S - 1) * (Su + Fu) + (S - 1) * Su;  // NO_SHARD: S = 1
    total += 2 * (R - 1) / R * Su;
    double whole = 0;
    for (const model::ParamSlot& s : units[u].params)
      if (s.tp.replicated()) whole += double(s.numel);
    total += 2 * (T - 1) / T * whole * 4;
  }
  const model::LlamaConfig& m = t.model().config();
  const double N = double(cfg.train.micro_batch_size) * cfg.train.seq_len;
  const double X = (T - 1) * (N / T) * double(m.hidden_size) * 4;
  total += ((frozen_table && !tied ? 1 : 2) + 10 * double(m.num_layers) + 3) * X + (T - 1) * N * 24;
  total += 2 * (S - 1) / S * 8 + 2 * (T - 1) / T * 8;
  total += 2 * (W - 1) / W * 8 * train::StepVotes::kSlots;
  if (m.is_moe()) total += 2 * (W - 1) / W * 8 * double(m.num_layers * m.num_experts);
  return total;
}

// Dense Llama tied and untied, LoRA on every linear layer (dropout on: its masks add no
// collective) and QLoRA on a frozen untied base, and a tiny Mixtral (4 experts, top-2, both
// router losses and auxiliary-loss-free balancing), at every layout the world holds.
TEST(TensorParallel, BytesPerStepEqualTheTheory) {
  const std::vector<std::string> lora = {"lora.enabled=true", "lora.rank=4", "lora.alpha=8",
                                         "lora.targets=all-linear", "lora.dropout=0.1"};
  // At T=4 too, o's and down's column slices are whole NF4 blocks: 256 / 4 = 64.
  const std::vector<std::string> qlora = {"lora.enabled=true", "lora.rank=4", "lora.alpha=8",
                                          "lora.targets=[q_proj, v_proj, down_proj]", "model.quantization=nf4",
                                          "model.hidden_size=256", "model.intermediate_size=256"};
  const std::vector<std::string> moe = {"model.num_experts=4", "model.experts_per_token=2",
                                        "model.router_aux_loss_coef=0.02", "model.router_z_loss_coef=0.001",
                                        "model.router_bias_update_rate=0.01"};
  const std::vector<std::pair<std::string, std::vector<std::string>>> models = {
      {"dense untied", model_keys(true, false)},
      {"dense tied", model_keys(true, true)},
      {"LoRA", with(model_keys(true, false), lora)},
      {"QLoRA", with(model_keys(true, false), qlora)},
      {"Mixtral", with(model_keys(true, false), moe)},
  };
  for (const Layout& l : {Layout{2, "FULL_SHARD"}, Layout{4, "FULL_SHARD"}, Layout{2, "SHARD_GRAD_OP"},
                          Layout{2, "HYBRID_SHARD", 1}}) {
    if (!fits(l)) continue;
    for (const auto& [what, keys] : models) {
      const config::Config cfg = tiny(with(keys, layout_keys(l)));
      auto groups = dist::split_process_groups(test::world_groups(), train::mesh_spec(cfg));
      train::Trainer t(cfg, groups);
      for (int i = 0; i < 2; ++i) {
        const obs::StepMetrics m = t.train_step();
        EXPECT_EQ(m.mesh, groups.mesh.shape().str());
        EXPECT_NE(obs::format_step_line(m, 2).find(" | mesh " + groups.mesh.shape().str()), std::string::npos);
        EXPECT_EQ(double(m.comm_bytes), expected_bytes(t, groups, cfg))
            << "T=" << l.tensor << " " << l.strategy << " " << what << " step " << i + 1;
      }
    }
  }
}

}  // namespace
}  // namespace fsdp
