// LlamaActivations: every buffer of one micro-batch, bound by the checkpointing policy;
// see activations.h and Note [Saved tensors].
#include "fsdp/model/activations.h"

#include <fmt/format.h>

#include "fsdp/core/error.h"
#include "fsdp/core/memory_category.h"
#include "fsdp/model/activation_offload.h"
#include "fsdp/model/expert_parallel.h"

namespace fsdp::model {

Placement placement(const ActivationCheckpointing& ac, SavedKind kind) {
  if (ac.mode == Recompute::None || kind == SavedKind::Statistic) return Placement::Own;
  if (ac.mode == Recompute::Full || kind == SavedKind::Cheap) return Placement::Shared;
  return ac.offload ? Placement::Offloaded : Placement::Own;
}

namespace {

// Binds a fresh struct: the members whose placement is `which` get buffers of their own,
// the others stay undefined. Returns the struct and its members in bind order.
struct Bound {
  BlockActivations block;
  std::vector<Tensor> tensors;
};
Bound bind_only(const LlamaConfig& c, int64_t B, int64_t T, DType dt, Device dev, const ActivationCheckpointing& ac,
                Placement which) {
  Bound b;
  b.block.bind(c, B, T, dt, [&](Tensor& t, const SavedSpec& s) {
    if (placement(ac, s.kind) == which) t = Tensor::empty(s.sizes, s.dtype, dev);
    b.tensors.push_back(t);
  });
  return b;
}

void check_same(const Tensor& lent, const SavedSpec& s) {
  FSDP_CHECK(lent.defined() && lent.sizes() == s.sizes && lent.dtype() == s.dtype,
             "activation checkpointing: the buffer lent to {} is {}, expected {} {}", s.name,
             lent.defined() ? lent.str() : std::string("undefined"), s.sizes.str(), dtype_name(s.dtype));
}

}  // namespace

LlamaActivations::LlamaActivations(const LlamaConfig& c, int64_t B, int64_t T, DType dt, Device dev,
                                   ActivationCheckpointing ac)
    : batch(B), seq_len(T), checkpointing(ac) {
  FSDP_CHECK(ac.every >= 1, "activation checkpointing every {} blocks: must be >= 1", ac.every);
  FSDP_CHECK(!ac.offload || ac.mode != Recompute::None,
             "activation offloading needs activation checkpointing (full or selective)");
  const int64_t N = B * T, C = c.hidden_size, L = c.num_layers;
  FSDP_CHECK(c.tensor_parallel >= 1 && N % c.tensor_parallel == 0,
             "tensor parallelism: {} ranks cannot share the {} tokens of a micro-batch", c.tensor_parallel, N);
  const int64_t rows = N / c.tensor_parallel;  // this tensor rank's rows of the residual stream
  {
    const memory::CategoryScope tag("batch");
    ids = Tensor::empty({N}, DType::I32, dev);
    targets = Tensor::empty({N}, DType::I32, dev);
    doc_start = Tensor::empty({B, T}, DType::I32, dev);
  }
  std::vector<int64_t> checkpointed;
  for (int64_t l = 0; l < L; ++l)
    if (ac.checkpointed(l)) checkpointed.push_back(l);
  const bool offloading = ac.offload && !checkpointed.empty();

  // The shared scratch, and the offload slots: a block input, then the offloaded members.
  std::vector<Tensor> lent_shared;
  if (!checkpointed.empty()) {
    const memory::CategoryScope tag("scratch/activation recompute");
    Bound shared_bound = bind_only(c, B, T, dt, dev, ac, Placement::Shared);
    shared = std::move(shared_bound.block);
    lent_shared = std::move(shared_bound.tensors);
  }
  std::vector<std::vector<Tensor>> slot_members, slot_tensors;
  if (offloading) {
    const memory::CategoryScope tag("activations/offload slots");
    for (int64_t s = 0; s < ActivationOffload::num_slots(ac.offload_horizon, int64_t(checkpointed.size())); ++s) {
      Bound slot = bind_only(c, B, T, dt, dev, ac, Placement::Offloaded);
      std::vector<Tensor> list{Tensor::empty({rows, C}, dt, dev)};
      for (const Tensor& t : slot.tensors)
        if (t.defined()) list.push_back(t);
      slot_members.push_back(std::move(slot.tensors));
      slot_tensors.push_back(std::move(list));
    }
    offload = std::make_unique<ActivationOffload>(checkpointed, ac.offload_horizon, dev, slot_tensors);
    recompute_out = Tensor::empty({rows, C}, dt, dev);
  }

  // Memory categories (fsdp/core/memory_category.h): what block l saves for its backward,
  // its input resid[l] included, is "activations/layers.l"; resid[L] is the head's.
  for (int64_t l = 0; l <= L; ++l) {
    const memory::CategoryScope tag(l < L ? fmt::format("activations/layers.{}", l) : std::string("activations/head"));
    const bool slotted = offloading && l < L && ac.checkpointed(l);
    resid.push_back(slotted ? slot_tensors[size_t(offload->slot_of(l))][0] : Tensor::empty({rows, C}, dt, dev));
  }
  for (int64_t l = 0; l < L; ++l) {
    const memory::CategoryScope tag(fmt::format("activations/layers.{}", l));
    BlockActivations block;
    if (!ac.checkpointed(l)) {
      block.bind(c, B, T, dt, allocate_on(dev));
    } else {
      const std::vector<Tensor>* slot = offloading ? &slot_members[size_t(offload->slot_of(l))] : nullptr;
      size_t i = 0;
      block.bind(c, B, T, dt, [&](Tensor& t, const SavedSpec& s) {
        switch (placement(ac, s.kind)) {
          case Placement::Own: t = Tensor::empty(s.sizes, s.dtype, dev); break;
          case Placement::Shared: t = lent_shared[i], check_same(t, s); break;
          case Placement::Offloaded: t = (*slot)[i], check_same(t, s); break;
        }
        ++i;
      });
    }
    blocks.push_back(std::move(block));
  }
  {
    const memory::CategoryScope tag("activations/head");
    hf = Tensor::empty({rows, C}, dt, dev);
    rstdf = Tensor::empty({rows}, stat_dtype(dt), dev);
    logits = Tensor::empty({N, c.local_vocab()}, dt, dev);
    losses = Tensor::empty({N}, stat_dtype(dt), dev);
  }
  {
    const memory::CategoryScope tag("scratch/backward");
    grads.bind(c, N, dt, allocate_on(dev));
  }
  if (c.tensor_parallel > 1) {
    const memory::CategoryScope tag("scratch/tensor parallel");
    tp_gathered = Tensor::empty({N, C}, dt, dev);
    tp_partial = Tensor::empty({N, C}, dt, dev);
    tp_stats = VocabParallelStats(N, int(c.tensor_parallel), dev);
  }
  if (c.expert_units()) {
    const memory::CategoryScope tag("scratch/expert parallel");
    ep_staging = Tensor::empty({max_received_rows(c, N), C}, dt, dev);
    ep_grouped = Tensor::empty({max_received_rows(c, N), C}, dt, dev);
  }
}

LlamaActivations::~LlamaActivations() = default;
LlamaActivations::LlamaActivations(LlamaActivations&&) noexcept = default;

const Tensor& LlamaActivations::recompute_output(int64_t layer) const {
  return recompute_out.defined() ? recompute_out : resid[size_t(layer) + 1];
}

}  // namespace fsdp::model
