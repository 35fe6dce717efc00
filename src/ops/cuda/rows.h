// The one layout type the CUDA launchers share with their host callers: a 2-D operand
// with packed rows and its own row stride (a column slice of a fused buffer). Plain C++,
// no CUDA or fmt: included by both the .cu and the .cpp side.
#pragma once

#include <cstdint>

namespace fsdp::cuda {

struct RowsView {
  void* data;
  int64_t stride;  // elements between rows
};

}  // namespace fsdp::cuda
