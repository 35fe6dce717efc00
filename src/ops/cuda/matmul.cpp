// The CUDA GEMM (fsdp/ops/matmul.h) through cuBLASLt, registered into matmul_stub.
//
// Row-major to cuBLASLt's column-major: a row-major [r, c] operand with row stride ld is
// the column-major [c, r] matrix with leading dimension ld, its transpose. So
//   C = op(A) @ op(B)   (row-major)   <=>   C^T = op(B)^T @ op(A)^T   (column-major)
// and cuBLASLt is called with its "A" = our b (transposed iff trans_b), its "B" = our a
// (transposed iff trans_a), m = N, n = M, and C/D = our c: no copies, any row strides.
//
// Types: float32 (fp32 compute; TF32 when fsdp::cuda::set_tf32(true), train.tf32),
// bfloat16 and float16 inputs and output with fp32 accumulation (CUBLAS_COMPUTE_32F: a
// float16 dot product does not overflow at 65504 on the way, only if its result does),
// float64. beta == 0 leaves C unread, so c may hold NaN. Per device: one handle, one
// 32 MiB workspace (cuBLASLt's advice for Hopper) allocated once, and a cache of
// descriptors, layouts and the heuristic's algorithm per shape, so a training step
// re-plans nothing after its first.
#include <cublasLt.h>

#include <array>
#include <mutex>
#include <unordered_map>

#include "fsdp/core/cuda.h"
#include "fsdp/core/cuda_check.h"
#include "fsdp/ops/matmul.h"
#include "launch_args.h"

namespace fsdp {
namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;
constexpr int kMaxDevices = 64;

struct PlanKey {
  DType dtype;
  bool trans_a, trans_b, tf32;
  int64_t m, n, k, lda, ldb, ldc;
  bool operator==(const PlanKey&) const = default;
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& p) const {
    size_t h = size_t(p.dtype) * 8 + size_t(p.trans_a) * 4 + size_t(p.trans_b) * 2 + size_t(p.tf32);
    for (int64_t v : {p.m, p.n, p.k, p.lda, p.ldb, p.ldc}) h = h * 1000003u ^ size_t(v);
    return h;
  }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A (our b), B (our a), C = D
  cublasLtMatmulAlgo_t algo{};
};

struct DeviceState {
  std::mutex mu;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::unordered_map<PlanKey, Plan, PlanKeyHash> plans;
};

DeviceState& device_state(int device) {
  static std::array<DeviceState, kMaxDevices> states;
  FSDP_CHECK(device >= 0 && device < kMaxDevices, "cuda:{} is beyond the {} devices supported", device, kMaxDevices);
  DeviceState& s = states[size_t(device)];
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.handle == nullptr) {
    FSDP_CUBLAS_CHECK(cublasLtCreate(&s.handle));
    FSDP_CUDA_CHECK(cudaMalloc(&s.workspace, kWorkspaceBytes));
  }
  return s;
}

cudaDataType_t data_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::F64: return CUDA_R_64F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    default:
      FSDP_FAIL("matmul: dtype {} is not implemented on the CUDA backend (float32, bfloat16, float16, float64)",
                dtype_name(t));
  }
}

// Leading dimension of a row-major operand: its row stride (any value >= the row length
// when there is one row, which cuBLASLt requires to be >= its column-major rows).
int64_t ld_of(const Tensor& t) { return t.size(0) > 1 ? t.stride(0) : std::max<int64_t>(t.size(1), 1); }

cublasLtMatrixLayout_t layout(cudaDataType_t type, const Tensor& t, int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  // Row-major [rows, cols] is column-major [cols, rows].
  FSDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, uint64_t(t.size(1)), uint64_t(t.size(0)), ld));
  return l;
}

Plan make_plan(DeviceState& s, const PlanKey& key, const Tensor& a, const Tensor& b, const Tensor& c) {
  const cudaDataType_t type = data_type(key.dtype);
  const bool f64 = key.dtype == DType::F64;
  const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : key.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  Plan p;
  FSDP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, compute, f64 ? CUDA_R_64F : CUDA_R_32F));
  const int32_t op_a = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our b
  const int32_t op_b = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  FSDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  FSDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  p.a = layout(type, b, key.ldb);
  p.b = layout(type, a, key.lda);
  p.c = layout(type, c, key.ldc);
  cublasLtMatmulPreference_t pref = nullptr;
  FSDP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspaceBytes;
  FSDP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  FSDP_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(s.handle, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &returned));
  FSDP_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  FSDP_CHECK(returned > 0, "matmul: cuBLASLt has no algorithm for {} [{}x{}] @ [{}x{}]{}{}", dtype_name(key.dtype),
             key.m, key.k, key.k, key.n, key.trans_a ? " (a transposed)" : "", key.trans_b ? " (b transposed)" : "");
  p.algo = result.algo;
  return p;
}

void matmul_cuda(const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a, bool trans_b, double alpha,
                 double beta) {
  const int64_t m = c.size(0), n = c.size(1), k = trans_a ? a.size(0) : a.size(1);
  if (m == 0 || n == 0) return;
  const int device = c.device().index;
  cuda::DeviceGuard guard(device);
  DeviceState& s = device_state(device);
  const PlanKey key{c.dtype(), trans_a, trans_b, c.dtype() == DType::F32 && cuda::tf32(), m, n, k, ld_of(a), ld_of(b),
                    ld_of(c)};
  Plan plan;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.plans.find(key);
    if (it == s.plans.end()) it = s.plans.emplace(key, make_plan(s, key, a, b, c)).first;
    plan = it->second;
  }
  const float alpha_f = float(alpha), beta_f = float(beta);
  const bool f64 = c.dtype() == DType::F64;
  const void* pa = f64 ? static_cast<const void*>(&alpha) : &alpha_f;
  const void* pb = f64 ? static_cast<const void*>(&beta) : &beta_f;
  FSDP_CUBLAS_CHECK(cublasLtMatmul(s.handle, plan.desc, pa, b.data_ptr(), plan.a, a.data_ptr(), plan.b, pb,
                                   c.data_ptr(), plan.c, c.data_ptr(), plan.c, &plan.algo, s.workspace,
                                   kWorkspaceBytes, cuda::stream_of(c)));
}

}  // namespace

FSDP_REGISTER_DISPATCH(matmul_stub, DeviceType::CUDA, &matmul_cuda);

}  // namespace fsdp
