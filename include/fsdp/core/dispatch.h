// Op dispatch in the manner of ATen's DECLARE_DISPATCH / REGISTER_DISPATCH.
// Each op's header declares a stub; its front end (src/ops/<op>.cpp) validates the
// arguments once for every backend and calls stub(device, args...); each backend registers its
// implementation from a static initialiser in src/ops/<backend>/<op>.cpp. Model code
// therefore never branches on the device. Stubs are constant-initialised, so registration
// order across translation units cannot matter. It lives in core, not ops, because core
// declares two stubs of its own (fsdp/core/device_kernels.h) that the op backends fill.
#pragma once

#include <utility>

#include "fsdp/core/device.h"
#include "fsdp/core/error.h"
#include "fsdp/core/op_profile.h"

namespace fsdp {

template <typename Fn>
struct DispatchStub {
  const char* name;
  Fn cpu = nullptr;
  Fn cuda = nullptr;

  constexpr explicit DispatchStub(const char* n) : name(n) {}

  Fn get(Device d) const {
    Fn f = d.is_cpu() ? cpu : cuda;
    FSDP_CHECK(f != nullptr, "op '{}' has no implementation for device {} in this build", name, d.str());
    return f;
  }
  // The device's implementation called with `args`: the front ends' one way in, so that
  // the op profiler (fsdp/core/op_profile.h) sees every op call. Off, it costs one branch.
  template <typename... Args>
  auto operator()(Device d, Args&&... args) const {
    const Fn f = get(d);
    if (!op_profile::enabled()) [[likely]]
      return f(std::forward<Args>(args)...);
    const op_profile::Scope scope(name, d);
    return f(std::forward<Args>(args)...);
  }
  bool set(DeviceType t, Fn f) {
    (t == DeviceType::CPU ? cpu : cuda) = f;
    return true;
  }
};

}  // namespace fsdp

#define FSDP_DECLARE_DISPATCH(fn_type, stub) extern ::fsdp::DispatchStub<fn_type> stub
#define FSDP_DEFINE_DISPATCH(stub) constinit decltype(stub) stub{#stub}
#define FSDP_REGISTER_DISPATCH(stub, device_type, fn) \
  [[maybe_unused]] static const bool fsdp_registered_##stub = ::fsdp::stub.set(device_type, fn)
