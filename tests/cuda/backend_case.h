// The dtype x case loop of the CUDA op tests, written once (ggml's test-backend-ops
// pattern): a test lists its cases as a table, and for_each_backend_case runs each case in
// float32, float64, bfloat16 and float16 against the CPU op, the reference. The CPU
// backend has float32 and float64 only, so a 16-bit case is referenced by the float32 op
// on its exact upcast inputs, rounded once to the 16-bit type (what a kernel computing in
// float must give). Each file states its tolerances per dtype in a Tolerance table.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "cuda_test_util.h"

namespace fsdp::test {

// A normalised-MSE bound per dtype (the reasons are in each test file's header comment).
struct Tolerance {
  double f64, f32, bf16, f16;
  double operator()(DType t) const {
    return t == DType::F64 ? f64 : t == DType::F32 ? f32 : t == DType::BF16 ? bf16 : f16;
  }
};

// The dtype the CPU reference of a dtype-t case computes in.
inline DType reference_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

// The CPU reference as a dtype-t result holds it: itself for float32 and float64, rounded
// once for the 16-bit types.
inline Tensor rounded_to(const Tensor& ref, DType t) { return ref.dtype() == t ? ref : ref.to(t); }

// One run of the loop: the dtype the CUDA op runs in and the one its reference runs in.
struct BackendCase {
  DType t;
  DType rt;  // reference_dtype(t)
};

// The name a case row goes by in failure messages: its name(), or n=<size> for a size.
inline std::string case_name(int64_t n) { return "n=" + std::to_string(n); }
template <class Row>
std::string case_name(const Row& row) {
  return row.name();
}

// run(BackendCase, row) for every dtype of kFloatTypes (outer) and every row of `table`
// (inner), each under a trace naming the dtype and the row, so a failed comparison says
// which case it was.
template <class Table, class Run>
void for_each_backend_case(const Table& table, Run&& run) {
  for (DType t : kFloatTypes)
    for (const auto& row : table) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + case_name(row));
      run(BackendCase{t, reference_dtype(t)}, row);
    }
}

}  // namespace fsdp::test
