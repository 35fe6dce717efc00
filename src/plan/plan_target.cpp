// Where a plan is for; see plan_target.h.
#include "fsdp/plan/plan_target.h"

#include <algorithm>

#include <fmt/format.h>

#include "fsdp/core/cli_args.h"
#include "fsdp/core/error.h"
#include "fsdp/plan/host_memory.h"
#if defined(FSDP_WITH_CUDA)
#include "fsdp/core/cuda.h"
#endif

namespace fsdp::plan {

namespace {

bool plans_for_gpu(const PlanRequest& a, const config::Config& cfg) {
  if (!a.device.empty()) return a.device == "cuda";
  if (cfg.train.device != "auto") return cfg.train.device == "cuda";
  if (cfg.train.dtype != DType::F32) return true;  // only the CUDA backend computes in 16 bits
#if defined(FSDP_WITH_CUDA)
  return cuda::real_gpu_visible();
#else
  return false;
#endif
}

}  // namespace

PlanTarget local_plan_target(const dist::WorldInfo& world, Device device) {
  PlanTarget t;
  t.ranks = world.size;
  t.ranks_per_node = world.local_size;
  t.gpu = device.is_cuda();
#if defined(FSDP_WITH_CUDA)
  if (t.gpu) {
    t.device_bytes = double(cuda::device_memory_bytes(device.index));
    t.device_source = fmt::format("{} ({})", device.str(), cuda::device_name(device.index));
    return t;
  }
#endif
  const int share = std::max(world.local_size, 1);
  const HostMemory host = host_memory_limit(share);
  t.device_bytes = host.bytes;
  t.address_space = host.address_space;
  if (host.node_wide) t.node_bytes = host.bytes * share;
  t.device_source = host.node_wide && share > 1
                        ? fmt::format("{} shared by {} ranks on {}", host.source, share, world.hostname)
                        : host.source;
  return t;
}

PlanTarget requested_plan_target(const PlanRequest& a, const config::Config& cfg) {
  PlanTarget t;
  t.gpu = plans_for_gpu(a, cfg);
  t.ranks = a.ranks;
  t.ranks_per_node = a.ranks_per_node > 0 ? a.ranks_per_node : (t.gpu ? 8 : a.ranks);
  const int share = std::min(t.ranks, t.ranks_per_node);
  if (!a.memory.empty()) {
    double bytes = 0;
    try {
      bytes = parse_bytes(a.memory, "--device-memory");
    } catch (const Error& e) {
      throw UsageError{e.what()};
    }
    t.device_source = "--device-memory " + a.memory + (t.gpu || share == 1 ? "" : fmt::format(" shared by {} ranks", share));
    t.node_bytes = t.gpu ? 0 : bytes;
    t.device_bytes = t.gpu ? bytes : bytes / share;
    return t;
  }
  if (t.gpu) {
#if defined(FSDP_WITH_CUDA)
    if (cuda::real_gpu_visible()) {
      t.device_bytes = double(cuda::device_memory_bytes(0));
      t.device_source = "cuda:0 (" + cuda::device_name(0) + ")";
      return t;
    }
#endif
    throw UsageError{"planning for a GPU on a machine without one: give its memory, e.g. --device-memory 80GB"};
  }
  const HostMemory host = host_memory_limit(share);
  t.device_bytes = host.bytes;
  t.address_space = host.address_space;
  if (host.node_wide) t.node_bytes = host.bytes * share;
  t.device_source = host.node_wide && share > 1 ? fmt::format("{} shared by {} ranks", host.source, share) : host.source;
  return t;
}

}  // namespace fsdp::plan
