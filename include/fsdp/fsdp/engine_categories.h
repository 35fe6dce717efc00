// The memory categories (fsdp/core/memory_category.h) the FSDP engine tags its bytes with:
// the trainable shards and moments are "sharded state", the frozen shards (LoRA's base)
// "frozen base", gradient shards and full gradients "gradients", gathered units (trainable
// or frozen bytes) "gathered parameters"; a pool buffer takes the category of its current
// use and, between uses, "fsdp buffer pool (idle)", an idle cache.
#pragma once

#include "fsdp/core/memory_category.h"

namespace fsdp::engine_category {

inline memory::Category sharded_state() {
  static const memory::Category c = memory::category("sharded state");
  return c;
}
inline memory::Category frozen_base() {
  static const memory::Category c = memory::category("frozen base");
  return c;
}
inline memory::Category gathered_parameters() {
  static const memory::Category c = memory::category("gathered parameters");
  return c;
}
inline memory::Category gradients() {
  static const memory::Category c = memory::category("gradients");
  return c;
}
inline memory::Category idle_pool() {
  static const memory::Category c = memory::category("fsdp buffer pool (idle)", /*idle_cache=*/true);
  return c;
}

}  // namespace fsdp::engine_category
