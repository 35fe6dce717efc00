// Devices, current streams (Note [CUDA current stream] in fsdp/core/cuda.h) and the
// host<->device copies behind fsdp::cuda::copy / to_device. The waits here (a copy into
// host memory, synchronize) also read the device error record (Note [Device error record]).
#include <cuda_runtime.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "device_errors.h"
#include "fsdp/core/cuda.h"
#include "fsdp/core/cuda_check.h"
#include "fsdp/core/host_wait.h"
#include "fsdp/core/trace.h"

namespace fsdp::cuda {
namespace {

constexpr int kMaxDevices = 64;

// The compute stream of each device, created on first use and kept for the process.
cudaStream_t compute_stream(int device) {
  static std::mutex mu;
  static cudaStream_t streams[kMaxDevices] = {};
  FSDP_CHECK(device >= 0 && device < kMaxDevices, "cuda:{} is beyond the {} devices supported", device, kMaxDevices);
  std::lock_guard<std::mutex> lock(mu);
  if (streams[device] == nullptr) {
    DeviceGuard guard(device);
    FSDP_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[device], cudaStreamNonBlocking));
    trace::name_stream(device, streams[device], "compute");
  }
  return streams[device];
}

thread_local cudaStream_t tl_current[kMaxDevices] = {};
std::atomic<bool> g_tf32{false};

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

bool is_emulated() {
#if defined(FSDP_CUDA_EMULATION)
  return true;
#else
  return false;
#endif
}

bool real_gpu_visible() { return !is_emulated() && device_count() > 0; }

bool tf32() { return g_tf32.load(std::memory_order_relaxed); }
void set_tf32(bool allow) { g_tf32.store(allow, std::memory_order_relaxed); }

void* current_stream(int device) {
  FSDP_CHECK(device >= 0 && device < kMaxDevices, "cuda:{} is beyond the {} devices supported", device, kMaxDevices);
  if (tl_current[device] == nullptr) tl_current[device] = compute_stream(device);
  return tl_current[device];
}

void set_current_stream(int device, void* stream) {
  FSDP_CHECK(device >= 0 && device < kMaxDevices, "cuda:{} is beyond the {} devices supported", device, kMaxDevices);
  tl_current[device] = static_cast<cudaStream_t>(stream);
}

void synchronize(int device) {
  DeviceGuard guard(device);
  wait_and_check_device_errors(device, static_cast<cudaStream_t>(current_stream(device)));
}

DeviceGuard::DeviceGuard(int device) : previous_(-1) {
  FSDP_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) FSDP_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
}

void copy(const Tensor& src, const Tensor& dst) {
  check_defined(src, "src");
  check_defined(dst, "dst");
  FSDP_CHECK(src.sizes() == dst.sizes() && src.dtype() == dst.dtype(),
             "cuda::copy from {} into {}: shapes and dtypes must match", src.str(), dst.str());
  check_contiguous(src, "src");
  check_contiguous(dst, "dst");
  if (src.numel() == 0) return;
  if (src.device().is_cpu() && dst.device().is_cpu()) {
    dst.copy_(src);
    return;
  }
  // The device whose stream carries the copy: the destination's, unless it is the host.
  const int device = dst.device().is_cuda() ? dst.device().index : src.device().index;
  DeviceGuard guard(device);
  auto* stream = static_cast<cudaStream_t>(current_stream(device));
  const cudaMemcpyKind kind = src.device().is_cpu()   ? cudaMemcpyHostToDevice
                              : dst.device().is_cpu() ? cudaMemcpyDeviceToHost
                                                      : cudaMemcpyDeviceToDevice;
  if (kind == cudaMemcpyDeviceToDevice && src.device() != dst.device()) {
    // Peer copy: order after the source device's work first.
    DeviceGuard src_guard(src.device().index);
    wait_for_stream(current_stream(src.device().index));
  }
  FSDP_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), src.nbytes(), kind, stream));
  if (kind != cudaMemcpyDeviceToHost) return;
  // The host buffer may be pageable and the caller may read it next: wait for the copy,
  // and let the device error record ride along.
  wait_and_check_device_errors(device, stream);
}

Tensor to_device(const Tensor& t, Device device) {
  check_defined(t, "tensor");
  const Tensor src = t.is_contiguous() ? t : (t.device().is_cpu() ? t.clone() : Tensor());
  FSDP_CHECK(src.defined(), "to_device of non-contiguous device tensor {}: not supported yet", t.str());
  Tensor out = Tensor::empty(t.sizes(), t.dtype(), device);
  copy(src, out);
  return out;
}

}  // namespace fsdp::cuda
