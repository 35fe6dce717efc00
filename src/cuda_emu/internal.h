// Private to the emulator: what the SIMT runner (simt.cpp) asks of the runtime stand-in
// (runtime.cpp): device limits, stream and pointer validation, per-kernel attributes, and
// the last-error record every failing call fills in.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace fsdp_emu {

// The limits of the emulated device: an H100 (sm_90), the strictest of the targets for
// nothing here; sm_80 differs only in the opt-in shared memory (163 KiB).
constexpr int kMaxThreadsPerBlock = 1024;
constexpr int kMaxBlockDim[3] = {1024, 1024, 64};
constexpr long long kMaxGridDim[3] = {2147483647LL, 65535, 65535};
constexpr size_t kSharedMemPerBlock = 48 * 1024;
constexpr size_t kSharedMemPerBlockOptin = 227 * 1024;
constexpr int kMultiProcessorCount = 132;

// Records e as the host thread's last error with the emulator's explanation; returns e.
cudaError_t fail(cudaError_t e, const std::string& detail);
// Sets only the explanation fsdpEmuLastErrorDetail() returns (for the library stand-ins,
// whose errors are their own status codes, not CUDA's last error).
void explain(const std::string& detail);

// The device a stream belongs to (the null and per-thread streams: the current device),
// or -1 with *why filled when the handle is not a live stream.
int stream_device(cudaStream_t stream, std::string* why);

// True when [p, p + bytes) lies inside one device allocation of `device` or one pinned
// host allocation (what a kernel on that device may dereference); p == nullptr is fine.
bool device_accessible(const void* p, size_t bytes, int device);
// "device allocation of 64 bytes at 0x..+8 on cuda:0", "host memory (not device-accessible)", ...
std::string describe_pointer(const void* p);

// Note [Deferred copies] (deferred_copies.cpp): asynchronous copies on a created stream wait
// in that stream's queue until something orders them.
bool may_defer(cudaStream_t stream);  // a created stream, and FSDP_EMU_DEFER_COPIES is not 0
void defer_copy(cudaStream_t stream, void* dst, const void* src, size_t bytes);
uint64_t stream_mark(cudaStream_t stream);  // the position an event recorded now stands for
void drain(cudaStream_t stream, uint64_t upto = UINT64_MAX);  // run the stream's copies up to a mark
void drain_all();
void drain_touching(const void* base, size_t bytes);  // every queued copy into or out of the range

// The dynamic shared memory a kernel may request: 48 KiB, or what cudaFuncSetAttribute
// raised it to.
size_t max_dynamic_shared(const void* kernel);

}  // namespace fsdp_emu
