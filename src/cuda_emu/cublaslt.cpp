// The cuBLASLt stand-in (include/cublasLt.h here states the semantics). Descriptors are
// plain structs; cublasLtMatmul validates every argument the way the library documents
// it, then computes on the CPU: operands converted to the accumulation type (float, or
// double for CUBLAS_COMPUTE_64F; float32 operands rounded to TF32 first under
// CUBLAS_COMPUTE_32F_FAST_TF32), an i-p-j loop per batch, alpha and beta applied in that
// type, and one rounding into D's type.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "internal.h"

struct cublasLtContext {
  int device;
};
struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  int32_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  int32_t pointer_mode = 0;  // host
};
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t order = CUBLASLT_ORDER_COL;
  int32_t batch = 1;
  int64_t batch_stride = 0;
};
struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t max_workspace = 0;
};

namespace fsdp_emu {
namespace {

cublasStatus_t bad(cublasStatus_t s, const std::string& why) {
  explain("cuBLASLt: " + why);
  return s;
}

size_t type_size(cudaDataType t) {
  switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_64F: return 8;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
  }
  return 0;
}

template <typename A>
A load(const void* p, cudaDataType t, int64_t i) {
  switch (t) {
    case CUDA_R_32F: return A(static_cast<const float*>(p)[i]);
    case CUDA_R_64F: return A(static_cast<const double*>(p)[i]);
    case CUDA_R_16BF: return A(__bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]));
    case CUDA_R_16F: return A(__half2float(static_cast<const __half*>(p)[i]));
  }
  return A(0);
}

template <typename A>
void store(void* p, cudaDataType t, int64_t i, A v) {
  switch (t) {
    case CUDA_R_32F: static_cast<float*>(p)[i] = float(v); return;
    case CUDA_R_64F: static_cast<double*>(p)[i] = double(v); return;
    case CUDA_R_16BF: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(float(v)); return;
    case CUDA_R_16F: static_cast<__half*>(p)[i] = __float2half_rn(float(v)); return;
  }
}

// A float32 operand as the tensor cores read it under CUBLAS_COMPUTE_32F_FAST_TF32: TF32
// keeps float32's 8-bit exponent and 10 of its 23 mantissa bits. Rounded to nearest, ties
// away from zero, as PTX's cvt.rna.tf32.f32 does; the GPU's own conversion inside cuBLAS
// is not documented bit for bit, so tests hold TF32 results to a TF32 tolerance, not bits.
float to_tf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;  // inf, NaN unchanged
  u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&x, &u, 4);
  return x;
}

// Elements a layout spans, from its first element to one past its last.
int64_t extent(const cublasLtMatrixLayoutOpaque_t& l) {
  if (l.rows == 0 || l.cols == 0) return 0;
  return int64_t(l.batch - 1) * l.batch_stride + int64_t(l.cols - 1) * l.ld + int64_t(l.rows);
}

std::string dims(const char* name, const cublasLtMatrixLayoutOpaque_t& l) {
  return std::string(name) + " " + std::to_string(l.rows) + "x" + std::to_string(l.cols) + " (ld " +
         std::to_string(l.ld) + ", batch " + std::to_string(l.batch) + ")";
}

// The shape rules cublasLtMatmul and the heuristic share; m, n, k on success.
cublasStatus_t check_shapes(const cublasLtMatmulDescOpaque_t* desc, const cublasLtMatrixLayoutOpaque_t* a,
                            const cublasLtMatrixLayoutOpaque_t* b, const cublasLtMatrixLayoutOpaque_t* c,
                            const cublasLtMatrixLayoutOpaque_t* d, int64_t* m, int64_t* n, int64_t* k) {
  if (desc == nullptr || a == nullptr || b == nullptr || c == nullptr || d == nullptr)
    return bad(CUBLAS_STATUS_INVALID_VALUE, "a null descriptor");
  for (const auto* l : {a, b, c, d}) {
    if (l->order != CUBLASLT_ORDER_COL) return bad(CUBLAS_STATUS_NOT_SUPPORTED, "only column-major layouts are emulated");
    if (l->ld < int64_t(l->rows) || l->ld < 1)
      return bad(CUBLAS_STATUS_INVALID_VALUE, "leading dimension " + std::to_string(l->ld) + " < rows " +
                                                  std::to_string(l->rows));
    if (type_size(l->type) == 0) return bad(CUBLAS_STATUS_NOT_SUPPORTED, "matrix type " + std::to_string(int(l->type)));
  }
  *m = int64_t(d->rows);
  *n = int64_t(d->cols);
  const bool ta = desc->trans_a == CUBLAS_OP_T, tb = desc->trans_b == CUBLAS_OP_T;
  const int64_t a_m = int64_t(ta ? a->cols : a->rows);
  *k = int64_t(ta ? a->rows : a->cols);
  const int64_t b_k = int64_t(tb ? b->cols : b->rows), b_n = int64_t(tb ? b->rows : b->cols);
  if (a_m != *m || b_k != *k || b_n != *n || c->rows != d->rows || c->cols != d->cols)
    return bad(CUBLAS_STATUS_INVALID_VALUE, "shapes do not chain: op(A) from " + dims("A", *a) + (ta ? " (T)" : "") +
                                                ", op(B) from " + dims("B", *b) + (tb ? " (T)" : "") + ", " +
                                                dims("C", *c) + ", " + dims("D", *d));
  if (a->batch != d->batch || b->batch != d->batch || c->batch != d->batch)
    return bad(CUBLAS_STATUS_INVALID_VALUE, "batch counts differ");
  if (a->type != b->type || c->type != d->type) return bad(CUBLAS_STATUS_NOT_SUPPORTED, "A/B or C/D types differ");
  const bool f64 = desc->compute == CUBLAS_COMPUTE_64F;
  if (f64 != (a->type == CUDA_R_64F) || f64 != (d->type == CUDA_R_64F) || f64 != (desc->scale == CUDA_R_64F) ||
      (!f64 && desc->scale != CUDA_R_32F) || (!f64 && d->type != CUDA_R_32F && d->type != a->type))
    return bad(CUBLAS_STATUS_NOT_SUPPORTED, "unsupported combination of compute, scale and matrix types");
  return CUBLAS_STATUS_SUCCESS;
}

bool overlaps(const void* p, int64_t pn, const void* q, int64_t qn) {
  const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(q);
  return pn > 0 && qn > 0 && a < b + uintptr_t(qn) && b < a + uintptr_t(pn);
}

template <typename A>
void compute(const cublasLtMatmulDescOpaque_t& desc, A alpha, A beta, const void* pa,
             const cublasLtMatrixLayoutOpaque_t& a, const void* pb, const cublasLtMatrixLayoutOpaque_t& b,
             const void* pc, const cublasLtMatrixLayoutOpaque_t& c, void* pd, const cublasLtMatrixLayoutOpaque_t& d,
             int64_t m, int64_t n, int64_t k) {
  const bool ta = desc.trans_a == CUBLAS_OP_T, tb = desc.trans_b == CUBLAS_OP_T;
  std::vector<A> acc(size_t(m * n)), av(size_t(m * k)), bv(size_t(k * n));
  for (int32_t batch = 0; batch < d.batch; ++batch) {
    const int64_t oa = batch * a.batch_stride, ob = batch * b.batch_stride;
    const int64_t oc = batch * c.batch_stride, od = batch * d.batch_stride;
    for (int64_t i = 0; i < m; ++i)  // av[i*k + p] = op(A)(i, p)
      for (int64_t p = 0; p < k; ++p) av[size_t(i * k + p)] = load<A>(pa, a.type, oa + (ta ? p + i * a.ld : i + p * a.ld));
    for (int64_t p = 0; p < k; ++p)  // bv[p*n + j] = op(B)(p, j)
      for (int64_t j = 0; j < n; ++j) bv[size_t(p * n + j)] = load<A>(pb, b.type, ob + (tb ? j + p * b.ld : p + j * b.ld));
    if (desc.compute == CUBLAS_COMPUTE_32F_FAST_TF32 && a.type == CUDA_R_32F) {
      if constexpr (std::is_same_v<A, float>) {
        for (A& x : av) x = to_tf32(x);
        for (A& x : bv) x = to_tf32(x);
      }
    }
    std::fill(acc.begin(), acc.end(), A(0));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) {
        const A x = av[size_t(i * k + p)];
        for (int64_t j = 0; j < n; ++j) acc[size_t(i * n + j)] += x * bv[size_t(p * n + j)];
      }
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) {
        A v = alpha * acc[size_t(i * n + j)];
        if (beta != A(0)) v += beta * load<A>(pc, c.type, oc + i + j * c.ld);  // C unread when beta == 0
        store<A>(pd, d.type, od + i + j * d.ld, v);
      }
  }
}

}  // namespace
}  // namespace fsdp_emu

using namespace fsdp_emu;

extern "C" {

const char* cublasLtGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasLtGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
  }
  return "unknown error";
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate with a null pointer");
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceCount(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return bad(CUBLAS_STATUS_NOT_INITIALIZED, "no device");
  }
  (void)cudaGetDevice(&device);
  *handle = new cublasLtContext{device};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (handle == nullptr) return bad(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy of a null handle");
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  if (desc == nullptr) return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescCreate with a null pointer");
  if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32 && compute != CUBLAS_COMPUTE_64F)
    return bad(CUBLAS_STATUS_NOT_SUPPORTED, "compute type " + std::to_string(int(compute)) + " not emulated");
  *desc = new cublasLtMatmulDescOpaque_t{compute, scale};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  if (desc == nullptr || buf == nullptr) return bad(CUBLAS_STATUS_INVALID_VALUE, "null descriptor or buffer");
  int32_t* field = nullptr;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: field = &desc->trans_a; break;
    case CUBLASLT_MATMUL_DESC_TRANSB: field = &desc->trans_b; break;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: field = &desc->pointer_mode; break;
    default: return bad(CUBLAS_STATUS_NOT_SUPPORTED, "matmul attribute " + std::to_string(int(attr)) + " not emulated");
  }
  if (size != sizeof(int32_t)) return bad(CUBLAS_STATUS_INVALID_VALUE, "attribute size " + std::to_string(size));
  std::memcpy(field, buf, sizeof(int32_t));
  if (attr == CUBLASLT_MATMUL_DESC_POINTER_MODE && *field != 0)
    return bad(CUBLAS_STATUS_NOT_SUPPORTED, "only host alpha/beta pointers are emulated");
  if (attr != CUBLASLT_MATMUL_DESC_POINTER_MODE && *field != CUBLAS_OP_N && *field != CUBLAS_OP_T)
    return bad(CUBLAS_STATUS_INVALID_VALUE, "transpose must be CUBLAS_OP_N or CUBLAS_OP_T");
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (layout == nullptr) return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutCreate with a null pointer");
  *layout = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  if (layout == nullptr || buf == nullptr) return bad(CUBLAS_STATUS_INVALID_VALUE, "null layout or buffer");
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_ORDER:
      if (size != 4) break;
      std::memcpy(&layout->order, buf, 4);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      if (size != 4) break;
      std::memcpy(&layout->batch, buf, 4);
      return layout->batch >= 1 ? CUBLAS_STATUS_SUCCESS : bad(CUBLAS_STATUS_INVALID_VALUE, "batch count < 1");
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      if (size != 8) break;
      std::memcpy(&layout->batch_stride, buf, 8);
      return CUBLAS_STATUS_SUCCESS;
    default: return bad(CUBLAS_STATUS_NOT_SUPPORTED, "layout attribute " + std::to_string(int(attr)) + " not emulated");
  }
  return bad(CUBLAS_STATUS_INVALID_VALUE, "layout attribute size " + std::to_string(size));
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceCreate with a null pointer");
  *pref = new cublasLtMatmulPreferenceOpaque_t{};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  if (pref == nullptr || buf == nullptr) return bad(CUBLAS_STATUS_INVALID_VALUE, "null preference or buffer");
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && size == 8) {
    std::memcpy(&pref->max_workspace, buf, 8);
    return CUBLAS_STATUS_SUCCESS;
  }
  if (attr == CUBLASLT_MATMUL_PREF_SEARCH_MODE) return CUBLAS_STATUS_SUCCESS;
  return bad(CUBLAS_STATUS_INVALID_VALUE, "preference attribute " + std::to_string(int(attr)));
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (handle == nullptr) return bad(CUBLAS_STATUS_NOT_INITIALIZED, "null handle");
  if (pref == nullptr || results == nullptr || returned == nullptr || requested < 1)
    return bad(CUBLAS_STATUS_INVALID_VALUE, "heuristic arguments");
  int64_t m, n, k;
  if (const cublasStatus_t s = check_shapes(desc, a, b, c, d, &m, &n, &k); s != CUBLAS_STATUS_SUCCESS) return s;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].workspaceSize = 0;  // the emulated algorithm needs none
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t*, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  if (handle == nullptr) return bad(CUBLAS_STATUS_NOT_INITIALIZED, "null handle");
  if (alpha == nullptr || beta == nullptr) return bad(CUBLAS_STATUS_INVALID_VALUE, "null alpha or beta");
  int64_t m, n, k;
  if (const cublasStatus_t s = check_shapes(desc, Adesc, Bdesc, Cdesc, Ddesc, &m, &n, &k); s != CUBLAS_STATUS_SUCCESS)
    return s;
  std::string why;
  const int device = stream_device(stream, &why);
  if (device < 0) return bad(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul on " + why);
  drain(stream);  // the stream's queued copies come first (Note [Deferred copies])
  if (device != handle->device)
    return bad(CUBLAS_STATUS_INVALID_VALUE, "handle of cuda:" + std::to_string(handle->device) + " used on a stream of cuda:" +
                                                std::to_string(device));
  struct Operand {
    const char* name;
    const void* p;
    const cublasLtMatrixLayoutOpaque_t* l;
  };
  const bool read_c = !(desc->compute == CUBLAS_COMPUTE_64F ? *static_cast<const double*>(beta) == 0.0
                                                            : *static_cast<const float*>(beta) == 0.0f);
  for (const Operand& o : {Operand{"A", A, Adesc}, Operand{"B", B, Bdesc}, Operand{"C", C, Cdesc}, Operand{"D", D, Ddesc}}) {
    if (o.name[0] == 'C' && !read_c) continue;
    const size_t bytes = size_t(extent(*o.l)) * type_size(o.l->type);
    if (bytes > 0 && (o.p == nullptr || !device_accessible(o.p, bytes, device)))
      return bad(CUBLAS_STATUS_INVALID_VALUE, dims(o.name, *o.l) + " spans " +
                                                  std::to_string(bytes) + " bytes from " + describe_pointer(o.p) +
                                                  ", beyond device memory of cuda:" + std::to_string(device));
  }
  const int64_t d_bytes = extent(*Ddesc) * int64_t(type_size(Ddesc->type));
  if (overlaps(D, d_bytes, A, extent(*Adesc) * int64_t(type_size(Adesc->type))) ||
      overlaps(D, d_bytes, B, extent(*Bdesc) * int64_t(type_size(Bdesc->type))))
    return bad(CUBLAS_STATUS_INVALID_VALUE, "D overlaps A or B");
  if (read_c && C != D && overlaps(D, d_bytes, C, extent(*Cdesc) * int64_t(type_size(Cdesc->type))))
    return bad(CUBLAS_STATUS_INVALID_VALUE, "D partially overlaps C (in place needs C == D)");
  if (workspace_bytes > 0 && !device_accessible(workspace, workspace_bytes, device))
    return bad(CUBLAS_STATUS_INVALID_VALUE, "workspace of " + std::to_string(workspace_bytes) + " bytes at " +
                                                describe_pointer(workspace) + " is not that much device memory");
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if (desc->compute == CUBLAS_COMPUTE_64F)
    compute<double>(*desc, *static_cast<const double*>(alpha), *static_cast<const double*>(beta), A, *Adesc, B, *Bdesc,
                    C, *Cdesc, D, *Ddesc, m, n, k);
  else
    compute<float>(*desc, *static_cast<const float*>(alpha), *static_cast<const float*>(beta), A, *Adesc, B, *Bdesc, C,
                   *Cdesc, D, *Ddesc, m, n, k);
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
