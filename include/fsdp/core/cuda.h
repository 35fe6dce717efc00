// The CUDA backend's devices, streams and host<->device copies, for code outside the
// backend. No CUDA header needed: streams travel as void* (cudaStream_t), as in
// fsdp/dist/nccl.h. Exists in builds with a CUDA backend (FSDP_WITH_CUDA): the real one
// (FSDP_CUDA) or the emulated one (FSDP_CUDA_EMULATION, see tests/README.md).
//
// Note [CUDA current stream]
// Every op on cuda:N enqueues its kernels, and the allocator its cudaMallocAsync /
// cudaFreeAsync, on this host thread's current stream for N: the device's compute stream
// (a non-blocking stream created on first use) unless set_current_stream chose another
// (e.g. the communication stream while an FSDP unit gathers). Memory freed on a stream
// may be reused by later work on that stream at once; work on another stream that still
// reads it must be ordered with an event first. Nothing synchronises the host except
// copies to host memory, sum_squares and synchronize().
//
// Note [Device error record]
// Kernels that find bad input (embedding: an id outside the vocabulary; cross_entropy: a
// target outside [0, V) that is not ignore_index) do not make the host wait to say so.
// They record the first such error in their device's error record (fsdp/core/
// cuda_device_error.h: which op, the position, the bad value, the bound; first error wins
// by atomicCAS), skip the row (a forward writes zeros there, a backward adds nothing for
// it; nothing out of bounds is read or written) and carry on. The host learns of it at the next point where it waits
// for the device anyway: every copy into host memory (cuda::copy, so Tensor::to(cpu) and
// the loss read-back), synchronize() and check_device_errors(). Each enqueues, before its
// wait, one copy of the 40-byte record into a pinned host buffer of the calling thread
// (asynchronous: it adds no wait of its own), then reads it: a recorded error is thrown as
// fsdp::Error with the CPU op's message plus that it was found at this read-back, and the
// record is reset (stream-ordered), so the next correct call works. The error surfaces
// after the op that caused it returned, possibly after further ops ran on zeroed rows:
// their results are as garbage as the bad input made them, which is why it is an error.
// The record is read on the waiting stream: a kernel on another stream shows at the first
// read-back ordered after it. sum_squares's own read-back does not read the record.
// Which of several bad positions in one launch is reported is not fixed on a GPU (blocks
// race for the record); the emulator runs blocks in order, so there the lowest block's.
#pragma once

#include <memory>
#include <string>

#include "fsdp/core/allocator.h"
#include "fsdp/core/tensor.h"

namespace fsdp::cuda {

int device_count();  // usable devices; 0 when none (no error)
// cudaDeviceProp's name ("NVIDIA H100 80GB HBM3"; the emulator names itself) and memory.
std::string device_name(int device);
size_t device_memory_bytes(int device);
bool is_emulated();  // the emulation build: kernels run on the CPU's SIMT emulator
// Whether a real GPU is visible: what `auto` device choices (train.device, generate
// --device) take, so that they never pick the emulator.
bool real_gpu_visible();

void* current_stream(int device);
void set_current_stream(int device, void* stream);  // nullptr: back to the compute stream
void synchronize(int device);  // the host waits for the current stream, then checks the error record
// Waits for the current stream of `device` and throws the error a kernel recorded there,
// if any (Note [Device error record]); returns at once when no kernel on the device was
// ever given the record.
void check_device_errors(int device);

// Whether float32 GEMMs may use TF32 tensor cores (train.tf32); off by default, so float32
// results stay float32-exact in their inputs.
bool tf32();
void set_tf32(bool allow);

// Makes `device` current for this host thread while in scope (kernels and copies on a
// stream must be issued with the stream's device current).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_;
};

// dst = src for tensors of one shape and dtype, either on the host or on a CUDA device,
// both contiguous. Copies into host memory return once the data is there.
void copy(const Tensor& src, const Tensor& dst);
// A contiguous copy of t on `device` (cpu or cuda:N); t may be strided on the host.
Tensor to_device(const Tensor& t, Device device);

// A host tensor in page-locked memory (cudaMallocHost): a copy from it to a device is a
// DMA the host does not wait for, where pageable memory is staged by the driver first.
// Such a copy reads the buffer until the stream reaches it, so the caller may refill it
// only after the stream has passed the copy (Trainer: the loss read-back that ends every
// micro-batch). Counted apart from allocator_for(cpu): its own small allocator.
Tensor pinned_empty(const Dims& sizes, DType dtype);
// Another allocator of page-locked host memory, counting only its own bytes (the offloaded
// activations' arena, fsdp/core/copy_stream.h).
std::unique_ptr<Allocator> new_pinned_allocator();

}  // namespace fsdp::cuda
