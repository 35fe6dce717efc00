// The CUDA runtime stand-in of the emulation build: the semantics cuda_runtime.h (this
// directory) documents, on host memory. One mutex guards the tables; device memory is
// registered by address so every call that takes a device pointer is checked against the
// allocation it points into, which is where a GPU would fault or return an error.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "internal.h"

struct CUstream_st {
  int device;
  unsigned flags;
};
struct CUevent_st {
  int device;
  unsigned flags;
  bool recorded = false;
  std::chrono::steady_clock::time_point when{};
  cudaStream_t stream = nullptr;  // where it was last recorded, and the queued copies it
  uint64_t mark = 0;              // stands after (Note [Deferred copies])
};
struct CUmemPoolHandle_st {
  int device;
  uint64_t release_threshold = 0;
  uint64_t used = 0, used_high = 0, reserved = 0, reserved_high = 0;
};

namespace fsdp_emu {
namespace {

enum class Kind { Device, Pinned };

struct Alloc {
  size_t size;
  int device;  // -1 for pinned host memory
  Kind kind;
  CUmemPoolHandle_st* pool;  // stream-ordered allocations: the pool they came from
};

size_t env_size(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v, &end, 10);
  if (end == v || *end != '\0') {
    std::fprintf(stderr, "fsdp_emu: %s=%s is not a number\n", name, v);
    std::abort();
  }
  return size_t(x);
}

struct Runtime {
  std::mutex mu;
  int count = int(env_size("FSDP_EMU_DEVICE_COUNT", 2));
  size_t capacity = env_size("FSDP_EMU_DEVICE_MEMORY", size_t(80) << 30);
  bool poison = env_size("FSDP_EMU_POISON", 1) != 0;
  std::vector<size_t> used = std::vector<size_t>(size_t(std::max(count, 0)), 0);
  std::map<uintptr_t, Alloc> allocs;
  std::set<const CUstream_st*> streams;
  std::set<const CUevent_st*> events;
  std::vector<std::unique_ptr<CUmemPoolHandle_st>> default_pools;
  std::unordered_map<const void*, size_t> max_dyn_smem;

  Runtime() {
    for (int d = 0; d < count; ++d) {
      default_pools.push_back(std::make_unique<CUmemPoolHandle_st>());
      default_pools.back()->device = d;
    }
  }
};

Runtime& rt() {
  static Runtime* r = new Runtime();  // never destroyed: frees during static destruction still find it
  return *r;
}

thread_local int tl_device = 0;
thread_local cudaError_t tl_last = cudaSuccess;
thread_local std::string tl_detail;

std::string hexptr(const void* p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}

std::string dev(int d) { return "cuda:" + std::to_string(d); }

// The allocation containing p (p == end counts, for empty ranges at the end); null if none.
const std::pair<const uintptr_t, Alloc>* find_alloc(const void* p) {
  auto& m = rt().allocs;
  const auto u = reinterpret_cast<uintptr_t>(p);
  auto it = m.upper_bound(u);
  if (it == m.begin()) return nullptr;
  --it;
  if (u > it->first + it->second.size) return nullptr;
  if (u == it->first + it->second.size && it->second.size > 0) {
    // One past the end of this allocation may also be the start of the next one.
    auto next = std::next(it);
    if (next != m.end() && next->first == u) return &*next;
  }
  return &*it;
}

// With the lock held.
std::string describe_locked(const void* p) {
  if (p == nullptr) return "a null pointer";
  const auto* a = find_alloc(p);
  if (a == nullptr) return hexptr(p) + " (host memory, not from cudaMalloc/cudaMallocHost: a GPU cannot reach it)";
  const size_t off = reinterpret_cast<uintptr_t>(p) - a->first;
  return hexptr(p) + " (offset " + std::to_string(off) + " of a " + std::to_string(a->second.size) + "-byte " +
         (a->second.kind == Kind::Device ? "allocation on " + dev(a->second.device) : std::string("pinned host allocation")) +
         ")";
}

cudaError_t check_device(int d) {
  Runtime& r = rt();
  if (r.count <= 0) return fail(cudaErrorNoDevice, "no emulated device (FSDP_EMU_DEVICE_COUNT=0)");
  if (d < 0 || d >= r.count)
    return fail(cudaErrorInvalidDevice,
                "device " + std::to_string(d) + " requested; the emulator has " + std::to_string(r.count) +
                    " (FSDP_EMU_DEVICE_COUNT)");
  return cudaSuccess;
}

// Stream lookup with the lock held.
int stream_device_locked(cudaStream_t s, std::string* why) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return tl_device;
  if (rt().streams.count(s) == 0) {
    *why = "stream " + hexptr(s) + ", which is not a live stream (destroyed, or never created)";
    return -1;
  }
  return s->device;
}

cudaError_t allocate(void** ptr, size_t size, int device, Kind kind, CUmemPoolHandle_st* pool, const char* call) {
  if (ptr == nullptr) return fail(cudaErrorInvalidValue, std::string(call) + " with a null result pointer");
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  Runtime& r = rt();
  if (kind == Kind::Device && r.used[size_t(device)] + size > r.capacity)
    return fail(cudaErrorMemoryAllocation,
                std::string(call) + " of " + std::to_string(size) + " bytes on " + dev(device) + ": " +
                    std::to_string(r.used[size_t(device)]) + " of " + std::to_string(r.capacity) +
                    " bytes already allocated (FSDP_EMU_DEVICE_MEMORY)");
  void* p = nullptr;
  // 256-byte alignment, as cudaMalloc guarantees; exact size, so ASan sees the true end.
  if (posix_memalign(&p, 256, size) != 0 || p == nullptr)
    return fail(cudaErrorMemoryAllocation, std::string(call) + " of " + std::to_string(size) + " bytes: host out of memory");
  if (r.poison) std::memset(p, 0xff, size);
  r.allocs.emplace(reinterpret_cast<uintptr_t>(p), Alloc{size, device, kind, pool});
  if (kind == Kind::Device) r.used[size_t(device)] += size;
  if (pool != nullptr) {
    pool->used += size;
    pool->used_high = std::max(pool->used_high, pool->used);
    pool->reserved = std::max(pool->reserved, pool->used);
    pool->reserved_high = std::max(pool->reserved_high, pool->reserved);
  }
  *ptr = p;
  return cudaSuccess;
}

cudaError_t release(void* p, Kind kind, const char* call) {
  if (p == nullptr) return cudaSuccess;
  Runtime& r = rt();
  auto it = r.allocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == r.allocs.end() || it->second.kind != kind) {
    const auto* a = find_alloc(p);
    return fail(cudaErrorInvalidValue,
                std::string(call) + "(" + hexptr(p) + "): " +
                    (a != nullptr && a->second.kind == kind
                         ? "not the start of its allocation (" + describe_locked(p) + ")"
                         : "not a live " + std::string(kind == Kind::Device ? "device" : "pinned host") +
                               " allocation (" + describe_locked(p) + "; freed twice?)"));
  }
  const Alloc a = it->second;
  r.allocs.erase(it);
  if (kind == Kind::Device) r.used[size_t(a.device)] -= a.size;
  if (a.pool != nullptr) {
    a.pool->used -= a.size;
    // The pool keeps up to its release threshold cached, as after a synchronisation.
    a.pool->reserved = std::max(a.pool->used, std::min<uint64_t>(a.pool->reserved, a.pool->release_threshold));
  }
  std::free(p);
  return cudaSuccess;
}

// Where a copy or memset operand lives: 1 inside a device allocation, 0 host memory, or
// -1 (with *why) when it starts in a device allocation and runs past its end.
int locate(const void* p, size_t n, std::string* why, const char* what) {
  const auto* a = find_alloc(p);
  if (a == nullptr || a->second.kind != Kind::Device) return 0;
  const auto u = reinterpret_cast<uintptr_t>(p);
  if (u + n > a->first + a->second.size) {
    *why = std::string(what) + " range of " + std::to_string(n) + " bytes at " + hexptr(p) +
           " runs past the end of its " + std::to_string(a->second.size) + "-byte device allocation (offset " +
           std::to_string(u - a->first) + ")";
    return -1;
  }
  return 1;
}

const char* kind_name(cudaMemcpyKind k) {
  switch (k) {
    case cudaMemcpyHostToHost: return "HostToHost";
    case cudaMemcpyHostToDevice: return "HostToDevice";
    case cudaMemcpyDeviceToHost: return "DeviceToHost";
    case cudaMemcpyDeviceToDevice: return "DeviceToDevice";
    case cudaMemcpyDefault: return "Default";
  }
  return "?";
}

// fsdpEmuHostBlockingCalls's count.
std::atomic<unsigned long long> g_host_blocking{0};
void host_blocks() { g_host_blocking.fetch_add(1, std::memory_order_relaxed); }

cudaError_t copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream, bool async,
                 const char* call) {
  std::lock_guard<std::mutex> lock(rt().mu);
  // cudaMemcpy always makes the host wait; cudaMemcpyAsync when device memory lands in
  // pageable memory.
  const auto* from = find_alloc(src);
  if (!async || (find_alloc(dst) == nullptr && from != nullptr && from->second.kind == Kind::Device)) host_blocks();
  std::string why;
  if (stream_device_locked(stream, &why) < 0) return fail(cudaErrorInvalidResourceHandle, std::string(call) + " on " + why);
  if (n == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return fail(cudaErrorInvalidValue, std::string(call) + " with a null pointer");
  const int d = locate(dst, n, &why, "destination");
  const int s = d < 0 ? 0 : locate(src, n, &why, "source");
  if (d < 0 || s < 0) return fail(cudaErrorInvalidValue, std::string(call) + ": " + why);
  const bool want_d = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool want_s = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
    return fail(cudaErrorInvalidMemcpyDirection, std::string(call) + " with copy kind " + std::to_string(int(kind)));
  if (kind != cudaMemcpyDefault && (want_d != (d == 1) || want_s != (s == 1)))
    return fail(cudaErrorInvalidValue, std::string(call) + "(" + kind_name(kind) + "): destination is " +
                                           describe_locked(dst) + ", source is " + describe_locked(src));
  if (async && may_defer(stream) && find_alloc(dst) != nullptr && from != nullptr) {
    defer_copy(stream, dst, src, n);  // Note [Deferred copies]
    return cudaSuccess;
  }
  drain(stream);             // after the stream's queued copies, as the stream orders them
  std::memcpy(dst, src, n);  // overlapping ranges are undefined in CUDA too (ASan reports them)
  return cudaSuccess;
}

cudaError_t set(void* p, int value, size_t n, cudaStream_t stream, const char* call) {
  drain(stream);
  std::lock_guard<std::mutex> lock(rt().mu);
  std::string why;
  if (stream_device_locked(stream, &why) < 0) return fail(cudaErrorInvalidResourceHandle, std::string(call) + " on " + why);
  if (n == 0) return cudaSuccess;
  const int d = locate(p, n, &why, "destination");
  if (d != 1)
    return fail(cudaErrorInvalidValue,
                std::string(call) + ": " + (d < 0 ? why : "destination is " + describe_locked(p) + ", not device memory"));
  std::memset(p, value, n);
  return cudaSuccess;
}

const char* error_string(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorAssert: return "device-side assert triggered";
    case cudaErrorIllegalInstruction: return "an illegal instruction was encountered";
    case cudaErrorMisalignedAddress: return "misaligned address";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorUnknown: return "unknown error";
  }
  return "unrecognized error code";
}

const char* error_name(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorAssert: return "cudaErrorAssert";
    case cudaErrorIllegalInstruction: return "cudaErrorIllegalInstruction";
    case cudaErrorMisalignedAddress: return "cudaErrorMisalignedAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorUnknown: return "cudaErrorUnknown";
  }
  return "cudaErrorUnrecognized";
}

}  // namespace

cudaError_t fail(cudaError_t e, const std::string& detail) {
  tl_last = e;
  tl_detail = detail;
  return e;
}

void explain(const std::string& detail) { tl_detail = detail; }

int stream_device(cudaStream_t stream, std::string* why) {
  std::lock_guard<std::mutex> lock(rt().mu);
  return stream_device_locked(stream, why);
}

bool device_accessible(const void* p, size_t bytes, int device) {
  if (p == nullptr) return true;
  std::lock_guard<std::mutex> lock(rt().mu);
  const auto* a = find_alloc(p);
  if (a == nullptr) return false;
  if (a->second.kind == Kind::Device && a->second.device != device) return false;
  return reinterpret_cast<uintptr_t>(p) + bytes <= a->first + a->second.size;
}

std::string describe_pointer(const void* p) {
  std::lock_guard<std::mutex> lock(rt().mu);
  return describe_locked(p);
}

size_t max_dynamic_shared(const void* kernel) {
  std::lock_guard<std::mutex> lock(rt().mu);
  auto it = rt().max_dyn_smem.find(kernel);
  return it == rt().max_dyn_smem.end() ? kSharedMemPerBlock : it->second;
}

}  // namespace fsdp_emu

using namespace fsdp_emu;

extern "C" {

const char* cudaGetErrorString(cudaError_t error) { return error_string(error); }
const char* cudaGetErrorName(cudaError_t error) { return error_name(error); }
const char* fsdpEmuLastErrorDetail(void) { return tl_detail.c_str(); }
unsigned long long fsdpEmuHostBlockingCalls(void) { return g_host_blocking.load(std::memory_order_relaxed); }

cudaError_t cudaGetLastError(void) {
  const cudaError_t e = tl_last;
  tl_last = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return tl_last; }

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return fail(cudaErrorInvalidValue, "cudaGetDeviceCount with a null pointer");
  *count = std::max(rt().count, 0);
  if (*count == 0) return fail(cudaErrorNoDevice, "no emulated device (FSDP_EMU_DEVICE_COUNT=0)");
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (const cudaError_t e = check_device(device); e != cudaSuccess) return e;
  tl_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return fail(cudaErrorInvalidValue, "cudaGetDevice with a null pointer");
  *device = tl_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (const cudaError_t e = check_device(device); e != cudaSuccess) return e;
  if (p == nullptr) return fail(cudaErrorInvalidValue, "cudaGetDeviceProperties with a null pointer");
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof p->name, "fsdp_train CUDA emulator (sm_90 limits)");
  p->totalGlobalMem = rt().capacity;
  p->sharedMemPerBlock = kSharedMemPerBlock;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = kMaxThreadsPerBlock;
  for (int d = 0; d < 3; ++d) {
    p->maxThreadsDim[d] = kMaxBlockDim[d];
    p->maxGridSize[d] = int(kMaxGridDim[d]);
  }
  p->clockRate = 1980000;
  p->totalConstMem = 65536;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = kMultiProcessorCount;
  p->l2CacheSize = 50 << 20;
  p->maxThreadsPerMultiProcessor = 2048;
  p->sharedMemPerMultiprocessor = 228 * 1024;
  p->sharedMemPerBlockOptin = kSharedMemPerBlockOptin;
  p->memoryBusWidth = 5120;
  p->pciBusID = device;
  p->unifiedAddressing = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (const cudaError_t e = check_device(device); e != cudaSuccess) return e;
  if (value == nullptr) return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute with a null pointer");
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = kMaxThreadsPerBlock; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = int(kSharedMemPerBlock); return cudaSuccess;
    case cudaDevAttrWarpSize: *value = 32; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = kMultiProcessorCount; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = int(kSharedMemPerBlockOptin); return cudaSuccess;
    case cudaDevAttrMemoryPoolsSupported: *value = 1; return cudaSuccess;
  }
  return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute " + std::to_string(int(attr)) + " not emulated");
}

cudaError_t cudaDeviceSynchronize(void) {
  host_blocks();
  drain_all();
  return check_device(tl_device);
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  if (const cudaError_t e = check_device(tl_device); e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lock(rt().mu);
  if (free != nullptr) *free = rt().capacity - rt().used[size_t(tl_device)];
  if (total != nullptr) *total = rt().capacity;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t size) {
  if (const cudaError_t e = check_device(tl_device); e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lock(rt().mu);
  return allocate(ptr, size, tl_device, Kind::Device, nullptr, "cudaMalloc");
}

cudaError_t cudaFree(void* ptr) {
  drain_all();  // cudaFree synchronises the device
  std::lock_guard<std::mutex> lock(rt().mu);
  return release(ptr, Kind::Device, "cudaFree");
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  std::lock_guard<std::mutex> lock(rt().mu);
  return allocate(ptr, size, -1, Kind::Pinned, nullptr, "cudaMallocHost");
}

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int) {
  std::lock_guard<std::mutex> lock(rt().mu);
  return allocate(ptr, size, -1, Kind::Pinned, nullptr, "cudaHostAlloc");
}

cudaError_t cudaFreeHost(void* ptr) {
  drain_all();  // as cudaFree
  std::lock_guard<std::mutex> lock(rt().mu);
  return release(ptr, Kind::Pinned, "cudaFreeHost");
}

cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) {
  drain(stream);
  std::lock_guard<std::mutex> lock(rt().mu);
  std::string why;
  const int d = stream_device_locked(stream, &why);
  if (d < 0) return fail(cudaErrorInvalidResourceHandle, "cudaMallocAsync on " + why);
  if (const cudaError_t e = check_device(d); e != cudaSuccess) return e;
  return allocate(ptr, size, d, Kind::Device, rt().default_pools[size_t(d)].get(), "cudaMallocAsync");
}

cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  drain(stream);
  std::lock_guard<std::mutex> lock(rt().mu);
  std::string why;
  if (stream_device_locked(stream, &why) < 0) return fail(cudaErrorInvalidResourceHandle, "cudaFreeAsync on " + why);
  // Copies other streams still have queued on this memory run first (Note [Deferred copies]).
  if (const auto it = rt().allocs.find(reinterpret_cast<uintptr_t>(ptr)); it != rt().allocs.end())
    drain_touching(ptr, it->second.size);
  return release(ptr, Kind::Device, "cudaFreeAsync");
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (const cudaError_t e = check_device(device); e != cudaSuccess) return e;
  if (pool == nullptr) return fail(cudaErrorInvalidValue, "cudaDeviceGetDefaultMemPool with a null pointer");
  *pool = rt().default_pools[size_t(device)].get();
  return cudaSuccess;
}

cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* pool, int device) { return cudaDeviceGetDefaultMemPool(pool, device); }

static cudaError_t check_pool(cudaMemPool_t pool, const char* call) {
  for (auto& p : rt().default_pools)
    if (p.get() == pool) return cudaSuccess;
  return fail(cudaErrorInvalidValue, std::string(call) + " on an unknown memory pool");
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  std::lock_guard<std::mutex> lock(rt().mu);
  if (const cudaError_t e = check_pool(pool, "cudaMemPoolSetAttribute"); e != cudaSuccess) return e;
  if (value == nullptr) return fail(cudaErrorInvalidValue, "cudaMemPoolSetAttribute with a null value");
  switch (attr) {
    case cudaMemPoolReuseFollowEventDependencies:
    case cudaMemPoolReuseAllowOpportunistic:
    case cudaMemPoolReuseAllowInternalDependencies: return cudaSuccess;  // reuse policy: nothing to emulate
    case cudaMemPoolAttrReleaseThreshold: pool->release_threshold = *static_cast<uint64_t*>(value); return cudaSuccess;
    case cudaMemPoolAttrReservedMemHigh: pool->reserved_high = pool->reserved; return cudaSuccess;  // resets to current
    case cudaMemPoolAttrUsedMemHigh: pool->used_high = pool->used; return cudaSuccess;
    default: return fail(cudaErrorInvalidValue, "cudaMemPoolSetAttribute: attribute " + std::to_string(int(attr)) + " is read-only");
  }
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  std::lock_guard<std::mutex> lock(rt().mu);
  if (const cudaError_t e = check_pool(pool, "cudaMemPoolGetAttribute"); e != cudaSuccess) return e;
  if (value == nullptr) return fail(cudaErrorInvalidValue, "cudaMemPoolGetAttribute with a null value");
  uint64_t v = 0;
  switch (attr) {
    case cudaMemPoolReuseFollowEventDependencies:
    case cudaMemPoolReuseAllowOpportunistic:
    case cudaMemPoolReuseAllowInternalDependencies: *static_cast<int*>(value) = 1; return cudaSuccess;
    case cudaMemPoolAttrReleaseThreshold: v = pool->release_threshold; break;
    case cudaMemPoolAttrReservedMemCurrent: v = pool->reserved; break;
    case cudaMemPoolAttrReservedMemHigh: v = pool->reserved_high; break;
    case cudaMemPoolAttrUsedMemCurrent: v = pool->used; break;
    case cudaMemPoolAttrUsedMemHigh: v = pool->used_high; break;
  }
  *static_cast<uint64_t*>(value) = v;
  return cudaSuccess;
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) {
  std::lock_guard<std::mutex> lock(rt().mu);
  if (const cudaError_t e = check_pool(pool, "cudaMemPoolTrimTo"); e != cudaSuccess) return e;
  pool->reserved = std::max<uint64_t>(pool->used, std::min<uint64_t>(pool->reserved, keep));
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return copy(dst, src, count, kind, nullptr, false, "cudaMemcpy");
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  return copy(dst, src, count, kind, stream, true, "cudaMemcpyAsync");
}
cudaError_t cudaMemset(void* ptr, int value, size_t count) { return set(ptr, value, count, nullptr, "cudaMemset"); }
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) {
  return set(ptr, value, count, stream, "cudaMemsetAsync");
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (const cudaError_t e = check_device(tl_device); e != cudaSuccess) return e;
  if (stream == nullptr) return fail(cudaErrorInvalidValue, "cudaStreamCreate with a null pointer");
  std::lock_guard<std::mutex> lock(rt().mu);
  *stream = new CUstream_st{tl_device, flags};
  rt().streams.insert(*stream);
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  drain(stream);
  std::lock_guard<std::mutex> lock(rt().mu);
  if (stream == nullptr || rt().streams.erase(stream) == 0)
    return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy of " + hexptr(stream) + ", which is not a live stream");
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  host_blocks();
  std::string why;
  if (stream_device(stream, &why) < 0) return fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize on " + why);
  drain(stream);
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  std::string why;
  if (stream_device(stream, &why) < 0) return fail(cudaErrorInvalidResourceHandle, "cudaStreamQuery on " + why);
  drain(stream);  // "done" only once its copies have run
  return cudaSuccess;
}

static cudaError_t check_event(cudaEvent_t e, const char* call) {
  if (e == nullptr || rt().events.count(e) == 0)
    return fail(cudaErrorInvalidResourceHandle, std::string(call) + " of " + hexptr(e) + ", which is not a live event");
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  std::lock_guard<std::mutex> lock(rt().mu);
  std::string why;
  if (stream_device_locked(stream, &why) < 0) return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent on " + why);
  if (const cudaError_t e = check_event(event, "cudaStreamWaitEvent"); e != cudaSuccess) return e;
  if (event->recorded) drain(event->stream, event->mark);  // what `stream` does next comes after them
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (const cudaError_t e = check_device(tl_device); e != cudaSuccess) return e;
  if (event == nullptr) return fail(cudaErrorInvalidValue, "cudaEventCreate with a null pointer");
  std::lock_guard<std::mutex> lock(rt().mu);
  *event = new CUevent_st{tl_device, flags};
  rt().events.insert(*event);
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(rt().mu);
  if (const cudaError_t e = check_event(event, "cudaEventDestroy"); e != cudaSuccess) return e;
  rt().events.erase(event);
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(rt().mu);
  if (const cudaError_t e = check_event(event, "cudaEventRecord"); e != cudaSuccess) return e;
  std::string why;
  const int d = stream_device_locked(stream, &why);
  if (d < 0) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord on " + why);
  if (d != event->device)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord of an event of " + dev(event->device) +
                                                    " on a stream of " + dev(d));
  event->recorded = true;
  event->when = std::chrono::steady_clock::now();
  event->stream = stream;
  event->mark = stream_mark(stream);
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  host_blocks();
  std::lock_guard<std::mutex> lock(rt().mu);
  if (const cudaError_t e = check_event(event, "cudaEventSynchronize"); e != cudaSuccess) return e;
  if (event->recorded) drain(event->stream, event->mark);
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(rt().mu);
  if (const cudaError_t e = check_event(event, "cudaEventQuery"); e != cudaSuccess) return e;
  if (event->recorded) drain(event->stream, event->mark);  // "complete" only once they have run
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  std::lock_guard<std::mutex> lock(rt().mu);
  if (const cudaError_t e = check_event(start, "cudaEventElapsedTime"); e != cudaSuccess) return e;
  if (const cudaError_t e = check_event(end, "cudaEventElapsedTime"); e != cudaSuccess) return e;
  if (ms == nullptr) return fail(cudaErrorInvalidValue, "cudaEventElapsedTime with a null pointer");
  if ((start->flags | end->flags) & cudaEventDisableTiming)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime of an event created with cudaEventDisableTiming");
  if (!start->recorded || !end->recorded) return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime of an event never recorded");
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return cudaSuccess;
}

cudaError_t fsdpEmuFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (func == nullptr) return fail(cudaErrorInvalidDeviceFunction, "cudaFuncSetAttribute of a null function");
  std::lock_guard<std::mutex> lock(rt().mu);
  switch (attr) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize:
      if (value < 0 || size_t(value) > kSharedMemPerBlockOptin)
        return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute(MaxDynamicSharedMemorySize, " + std::to_string(value) +
                                               "): the device's opt-in maximum is " +
                                               std::to_string(kSharedMemPerBlockOptin) + " bytes");
      rt().max_dyn_smem[func] = size_t(value);
      return cudaSuccess;
    case cudaFuncAttributePreferredSharedMemoryCarveout: return cudaSuccess;
  }
  return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: attribute " + std::to_string(int(attr)) + " not emulated");
}

}  // extern "C"
