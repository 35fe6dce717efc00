// The offload slots' round trip through host memory; see activation_offload.h.
#include "fsdp/model/activation_offload.h"

#include <algorithm>

#include "fsdp/core/error.h"

namespace fsdp::model {

int64_t ActivationOffload::num_slots(int horizon, int64_t checkpointed_blocks) {
  return std::min<int64_t>(checkpointed_blocks, std::max<int64_t>(int64_t(horizon) + 1, 3));
}

ActivationOffload::ActivationOffload(std::vector<int64_t> layers, int horizon, Device device,
                                     std::vector<std::vector<Tensor>> slots)
    : layers_(std::move(layers)), horizon_(horizon), slots_(std::move(slots)) {
  FSDP_CHECK(horizon_ >= 1, "activation offload horizon must be >= 1, got {}", horizon_);
  FSDP_CHECK(!layers_.empty() && std::is_sorted(layers_.begin(), layers_.end()),
             "activation offload over no checkpointed layers");
  FSDP_CHECK(int64_t(slots_.size()) == num_slots(horizon_, int64_t(layers_.size())),
             "activation offload: {} slots for {} blocks and horizon {}", slots_.size(), layers_.size(), horizon_);
  stream_ = std::make_unique<CopyStream>(device, int(4 * slots_.size()));
  for (size_t j = 0; j < layers_.size(); ++j) {
    std::vector<Tensor> host;
    for (const Tensor& t : slots_.front()) host.push_back(stream_->host_empty(t.sizes(), t.dtype()));
    host_.push_back(std::move(host));
  }
  to_host_pending_.assign(slots_.size(), false);
  backward_pending_.assign(slots_.size(), false);
}

int64_t ActivationOffload::ordinal(int64_t layer) const {
  const auto it = std::lower_bound(layers_.begin(), layers_.end(), layer);
  FSDP_CHECK(it != layers_.end() && *it == layer, "layer {} is not an offloaded (checkpointed) layer", layer);
  return int64_t(it - layers_.begin());
}

int64_t ActivationOffload::slot_of(int64_t layer) const { return ordinal(layer) % num_slots(); }

double ActivationOffload::host_bytes() const {
  double b = 0;
  for (const auto& block : host_)
    for (const Tensor& t : block) b += double(t.nbytes());
  return b;
}

void ActivationOffload::before_write(int64_t layer) {
  const int64_t s = slot_of(layer);
  if (!to_host_pending_[size_t(s)]) return;
  stream_->compute_waits(ev_to_host(s));  // the slot's previous block is on the host
  to_host_pending_[size_t(s)] = false;
}

void ActivationOffload::stash(int64_t layer) {
  const int64_t j = ordinal(layer), s = j % num_slots();
  stream_->record_on_compute(ev_forward(s));
  stream_->copy_waits(ev_forward(s));  // the block's forward has written the slot
  for (size_t i = 0; i < slots_[size_t(s)].size(); ++i) stream_->copy(slots_[size_t(s)][i], host_[size_t(j)][i]);
  stream_->record_on_copy(ev_to_host(s));
  to_host_pending_[size_t(s)] = true;
}

void ActivationOffload::start_fetch(int64_t j) {
  const int64_t s = j % num_slots();
  if (backward_pending_[size_t(s)]) {
    stream_->copy_waits(ev_backward(s));  // the slot's previous block's backward is done with it
    backward_pending_[size_t(s)] = false;
  }
  // A copy to the host still pending on this slot is ahead of this one on the same stream.
  for (size_t i = 0; i < slots_[size_t(s)].size(); ++i) stream_->copy(host_[size_t(j)][i], slots_[size_t(s)][i]);
  stream_->record_on_copy(ev_to_device(s));
}

void ActivationOffload::begin_backward() {
  const int64_t n = int64_t(layers_.size());
  for (int64_t j = n - 1; j >= std::max<int64_t>(0, n - horizon_); --j) start_fetch(j);
}

void ActivationOffload::fetch(int64_t layer) {
  const int64_t j = ordinal(layer);
  stream_->compute_waits(ev_to_device(j % num_slots()));
  if (j - horizon_ >= 0) start_fetch(j - horizon_);
}

void ActivationOffload::release(int64_t layer) {
  const int64_t s = slot_of(layer);
  stream_->record_on_compute(ev_backward(s));
  backward_pending_[size_t(s)] = true;
}

}  // namespace fsdp::model
