// The one error of a CPU kernel asked for a dtype it has no loop for: the CPU backend is
// the float32/float64 reference, so every op fails the same way, naming the op and dtype.
#pragma once

#include "fsdp/core/dtype.h"
#include "fsdp/core/error.h"

namespace fsdp::cpu {

[[noreturn]] inline void unsupported(const char* op, DType t) {
  FSDP_FAIL("{}: dtype {} is not implemented on the CPU backend (float32, float64)", op, dtype_name(t));
}

}  // namespace fsdp::cpu
