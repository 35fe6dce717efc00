// Moving (token, choice) pairs to their experts' ranks and back; see Note [Expert-parallel
// dispatch] in moe_dispatch.h.
#include "fsdp/model/moe_dispatch.h"

#include "fsdp/core/error.h"
#include "fsdp/core/memory_category.h"
#if defined(FSDP_WITH_CUDA)
#include "fsdp/core/cuda.h"
#endif

namespace fsdp::model {

DispatchLayout dispatch_layout(const std::vector<int64_t>& counts, int64_t n, int rank, int ranks) {
  FSDP_CHECK(ranks >= 1 && rank >= 0 && rank < ranks && n % ranks == 0 && int64_t(counts.size()) == n * ranks,
             "dispatch layout: {} counts for {} experts over {} ranks (rank {})", counts.size(), n, ranks, rank);
  const int64_t nl = n / ranks, first = int64_t(rank) * nl;
  auto count = [&](int64_t src, int64_t e) { return counts[size_t(src * n + e)]; };
  DispatchLayout d;
  d.send_rows.assign(size_t(ranks), 0);
  d.recv_rows.assign(size_t(ranks), 0);
  for (int j = 0; j < ranks; ++j)
    for (int64_t e = 0; e < nl; ++e) d.send_rows[size_t(j)] += count(rank, int64_t(j) * nl + e);
  d.block_rows.assign(size_t(ranks * nl), 0);
  d.block_staged.assign(size_t(ranks * nl), 0);
  d.block_grouped.assign(size_t(ranks * nl), 0);
  d.block_source.assign(size_t(ranks * nl), 0);
  // Staging: source by source, each source's rows expert by expert (as it sorted them).
  int64_t at = 0;
  for (int i = 0; i < ranks; ++i) {
    int64_t before = 0;  // source i's pairs of the experts before this rank's first
    for (int64_t e = 0; e < first; ++e) before += count(i, e);
    for (int64_t e = 0; e < nl; ++e) {
      const size_t b = size_t(i * nl + e);
      d.block_rows[b] = count(i, first + e);
      d.block_source[b] = before;
      before += d.block_rows[b];
      d.block_staged[b] = at;
      at += d.block_rows[b];
      d.recv_rows[size_t(i)] += d.block_rows[b];
    }
  }
  d.received = at;
  // Grouped: expert by expert, each expert's rows source by source.
  d.expert_begin.assign(size_t(nl) + 1, 0);
  at = 0;
  for (int64_t e = 0; e < nl; ++e) {
    d.expert_begin[size_t(e)] = at;
    for (int i = 0; i < ranks; ++i) {
      const size_t b = size_t(i * nl + e);
      d.block_grouped[b] = at;
      at += d.block_rows[b];
    }
  }
  d.expert_begin[size_t(nl)] = at;
  return d;
}

ExpertDispatch::ExpertDispatch(const LlamaConfig& cfg, ExpertGroup* group)
    : group_(group),
      experts_(cfg.num_experts),
      local_experts_(cfg.is_moe() ? cfg.local_experts() : 0),
      hidden_(cfg.hidden_size) {
  if (!on()) return;
  FSDP_CHECK(group_->size() == cfg.expert_parallel,
             "the model's experts are split over {} ranks but its expert group has {}", cfg.expert_parallel,
             group_->size());
  // The counts travel as float64, exact for any count below 2^53 (the collectives move
  // floating-point tensors); on the host, where the layer's group sizes already are.
  counts_mine_ = Tensor::zeros({experts_}, DType::F64);
  counts_all_ = Tensor::zeros({experts_ * group_->size()}, DType::F64);
}

DispatchLayout ExpertDispatch::exchange(const std::vector<int64_t>& counts) const {
  FSDP_CHECK(on() && int64_t(counts.size()) == experts_, "expert dispatch: {} counts for {} experts", counts.size(),
             experts_);
  double* mine = counts_mine_.data<double>();
  for (int64_t e = 0; e < experts_; ++e) mine[e] = double(counts[size_t(e)]);
  group_->all_gather(counts_mine_, counts_all_);
  std::vector<int64_t> all(size_t(counts_all_.numel()));
  const double* got = counts_all_.data<double>();
  for (size_t i = 0; i < all.size(); ++i) all[i] = int64_t(got[i]);
  return layout_of(all);
}

void ExpertDispatch::use(const Tensor& staging, const Tensor& grouped) {
  staging_ = staging;
  grouped_ = grouped;
  if (!on() || staging.device().is_cpu() || (counts_device_.defined() && counts_device_.device() == staging.device()))
    return;
#if defined(FSDP_WITH_CUDA)
  const memory::CategoryScope tag("scratch/expert parallel");
  counts_device_ = Tensor::empty({experts_ * group_->size()}, DType::I32, staging.device());
  counts_host_ = cuda::pinned_empty({experts_ * group_->size()}, DType::I32);
#endif
}

// Note [Expert counts on a GPU].
DispatchLayout ExpertDispatch::exchange(const Tensor& counts, std::vector<int64_t>& mine) const {
  FSDP_CHECK(on() && counts_device_.defined() && counts.device() == counts_device_.device() &&
                 counts.dtype() == DType::I32 && counts.numel() == experts_,
             "expert dispatch: counts {} for {} experts on {} (the exchange's buffers: {})", counts.str(), experts_,
             counts.device().str(), counts_device_.defined() ? counts_device_.str() : std::string("none"));
  const int64_t width = int64_t(dtype_size(DType::I32));
  group_->all_gather(counts.reinterpret(DType::U8, 0, {experts_ * width}),
                     counts_device_.reinterpret(DType::U8, 0, {counts_device_.numel() * width}));
  counts_host_.copy_(counts_device_);  // the one read-back
  const int32_t* got = counts_host_.data<int32_t>();
  const std::vector<int64_t> all(got, got + counts_host_.numel());
  const auto row = all.begin() + int64_t(group_->rank()) * experts_;
  mine.assign(row, row + experts_);
  return layout_of(all);
}

DispatchLayout ExpertDispatch::layout_of(const std::vector<int64_t>& all) const {
  DispatchLayout d = dispatch_layout(all, experts_, group_->rank(), group_->size());
  FSDP_CHECK(staging_.defined() && d.received <= staging_.size(0),
             "expert dispatch: {} rows received, but the expert-side buffers hold {}", d.received,
             staging_.defined() ? staging_.size(0) : 0);
  return d;
}

void ExpertDispatch::regroup(const DispatchLayout& d, const Tensor& from, const Tensor& to, bool to_grouped) const {
  for (size_t b = 0; b < d.block_rows.size(); ++b) {
    const int64_t rows = d.block_rows[b];
    if (rows == 0) continue;
    const int64_t src = to_grouped ? d.block_staged[b] : d.block_grouped[b];
    const int64_t dst = to_grouped ? d.block_grouped[b] : d.block_staged[b];
    to.narrow(0, dst, rows).copy_(from.narrow(0, src, rows));
  }
}

namespace {

std::vector<int64_t> elements(const std::vector<int64_t>& rows, int64_t width) {
  std::vector<int64_t> e(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) e[i] = rows[i] * width;
  return e;
}

int64_t total(const std::vector<int64_t>& rows) {
  int64_t t = 0;
  for (int64_t r : rows) t += r;
  return t;
}

}  // namespace

void ExpertDispatch::dispatch(const DispatchLayout& d, const Tensor& local, const Tensor& grouped) const {
  const int64_t sent = total(d.send_rows);
  FSDP_CHECK(local.size(0) >= sent && grouped.size(0) >= d.received && local.size(1) == hidden_,
             "expert dispatch: {} local rows for {} to send, {} grouped rows for {} received", local.size(0), sent,
             grouped.size(0), d.received);
  const Tensor staged = staging_.narrow(0, 0, d.received);
  group_->all_to_all_v(local.narrow(0, 0, sent), elements(d.send_rows, hidden_), staged,
                       elements(d.recv_rows, hidden_));
  regroup(d, staged, grouped, /*to_grouped=*/true);
}

void ExpertDispatch::combine(const DispatchLayout& d, const Tensor& grouped, const Tensor& local) const {
  const int64_t returned = total(d.send_rows);
  FSDP_CHECK(local.size(0) >= returned && grouped.size(0) >= d.received && local.size(1) == hidden_,
             "expert combine: {} local rows for {} returned, {} grouped rows for {} received", local.size(0), returned,
             grouped.size(0), d.received);
  const Tensor staged = staging_.narrow(0, 0, d.received);
  regroup(d, grouped, staged, /*to_grouped=*/false);
  group_->all_to_all_v(staged, elements(d.recv_rows, hidden_), local.narrow(0, 0, returned),
                       elements(d.send_rows, hidden_));
}

}  // namespace fsdp::model
