// A copy stream beside a device's compute stream, for moving tensors between device memory
// and host memory while the compute stream works on (activation offloading), with a fixed
// set of events that order the two streams.
//
// Note [Copy stream ordering]
// Nothing orders the copy stream against the compute stream except these events: a copy
// that reads what a kernel wrote waits for an event the compute stream recorded after that
// kernel (record_on_compute, then copy_waits), and a kernel that reads what a copy wrote,
// or overwrites what a copy still reads, waits for an event the copy stream recorded after
// that copy (record_on_copy, then compute_waits). The host memory must be page-locked
// (host_empty) so the copies are asynchronous. In the emulation build the copies on this
// stream run as late as those events allow (src/cuda_emu: deferred copies), so a missing
// wait shows as wrong bits in the tests instead of passing by luck.
// On the CPU backend (device cpu) the same calls run each copy at once on the calling
// thread and the events do nothing: the code path, and the bytes held on each side, are the
// same, but nothing overlaps.
#pragma once

#include <memory>

#include "fsdp/core/allocator.h"
#include "fsdp/core/tensor.h"

namespace fsdp {

class CopyStream {
 public:
  // `events` events, numbered 0 .. events-1, created once.
  CopyStream(Device device, int events);
  ~CopyStream();
  CopyStream(const CopyStream&) = delete;
  CopyStream& operator=(const CopyStream&) = delete;

  Device device() const { return device_; }
  // Event e marks the compute stream's work enqueued so far (the thread's current stream).
  void record_on_compute(int e);
  // Event e marks the copy stream's work enqueued so far.
  void record_on_copy(int e);
  // The copy stream's next work waits for event e (recorded on the compute stream).
  void copy_waits(int e);
  // The compute stream's next work waits for event e (recorded on the copy stream).
  void compute_waits(int e);
  // dst = src on the copy stream: one of them on the device, the other from host_empty;
  // contiguous, of one shape and dtype.
  void copy(const Tensor& src, const Tensor& dst);
  // The host waits until the copy stream has done everything enqueued on it.
  void synchronize();

  // Host memory for the other side of the copies: page-locked with a CUDA device, else from
  // an allocator of its own (so its bytes are counted apart from the device's).
  Tensor host_empty(const Dims& sizes, DType dtype) const;
  // The bytes host_empty holds now and at most, over every CopyStream of the process.
  static MemoryStats host_stats();

  struct Impl;  // the device's side (src/core/copy_stream_impl.h)

 private:
  Device device_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fsdp
