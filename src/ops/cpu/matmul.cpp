// CPU matmul: c = alpha * op(a) @ op(b) + beta * c through the BLAS (OpenBLAS by default,
// see shared/notes/cpu-blas.md for why it is linked by name).
// Every operand is a row-major matrix with packed rows, so its row stride is exactly the
// BLAS leading dimension and transposes are passed to the BLAS instead of copied.
// The BLAS runs its own threads; the thread count OpenMP is given does not enter here,
// and the BLAS splits only the output (never the k sum) among its threads, so the bits do
// not depend on either thread count.
#include <cblas.h>

#include "fsdp/ops/matmul.h"

namespace fsdp {
namespace {

inline void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
inline void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, double alpha, const double* a, int lda,
                 const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// The BLAS leading dimension: the row stride, except for a single row, whose stride is
// never used but must still satisfy the BLAS check ld >= max(1, columns).
int leading_dim(const Tensor& t) {
  const int64_t cols = t.size(1) > 0 ? t.size(1) : 1;
  return int(t.size(0) <= 1 ? cols : std::max<int64_t>(t.stride(0), cols));
}

template <typename T>
void matmul_impl(const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a, bool trans_b, double alpha,
                 double beta) {
  const int m = int(c.size(0)), n = int(c.size(1));
  const int k = int(trans_a ? a.size(0) : a.size(1));
  T* cp = c.data<T>();
  const int ldc = leading_dim(c);
  if (k == 0) {
    // op(a) @ op(b) is all zeros: only the beta scaling remains. Done here rather than
    // trusting every BLAS with k == 0; beta == 0 overwrites (NaN in c must not survive).
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        T& x = cp[int64_t(i) * ldc + j];
        x = beta == 0.0 ? T(0) : T(beta) * x;
      }
    return;
  }
  gemm(trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, T(alpha), a.data<T>(),
       leading_dim(a), b.data<T>(), leading_dim(b), T(beta), cp, ldc);
}

void matmul_cpu(const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a, bool trans_b, double alpha,
                double beta) {
  switch (a.dtype()) {
    case DType::F32: return matmul_impl<float>(a, b, c, trans_a, trans_b, alpha, beta);
    case DType::F64: return matmul_impl<double>(a, b, c, trans_a, trans_b, alpha, beta);
    default: FSDP_FAIL("matmul: the CPU backend supports float32 and float64, got a {}", a.str());
  }
}

}  // namespace

FSDP_REGISTER_DISPATCH(matmul_stub, DeviceType::CPU, &matmul_cpu);

}  // namespace fsdp
