// cuBLASLt, loaded when a GPU run first calls it (fsdp/core/cuda_libraries.h says where it is
// looked for and why it is not linked). One forwarder per function the backend calls
// (fsdp/core/lazy_symbol.h); the emulation build links its own stand-ins instead.
#if defined(FSDP_CUDA_LOADS_LIBRARIES)
#include <cublasLt.h>

#include "fsdp/core/lazy_symbol.h"

// clang-format off
FSDP_LAZY_FUNCTION(CudaLibrary::CublasLt, cublasStatus_t, cublasLtCreate, (cublasLtHandle_t* h), (h))
FSDP_LAZY_FUNCTION(CudaLibrary::CublasLt, cublasStatus_t, cublasLtDestroy, (cublasLtHandle_t h), (h))
FSDP_LAZY_FUNCTION(CudaLibrary::CublasLt, const char*, cublasLtGetStatusName, (cublasStatus_t s), (s))
FSDP_LAZY_FUNCTION(CudaLibrary::CublasLt, const char*, cublasLtGetStatusString, (cublasStatus_t s), (s))
FSDP_LAZY_FUNCTION(CudaLibrary::CublasLt, cublasStatus_t, cublasLtMatmul,
                   (cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                    cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                    const void* C, cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                    const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes, cudaStream_t stream),
                   (h, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace, workspace_bytes,
                    stream))
FSDP_LAZY_FUNCTION(CudaLibrary::CublasLt, cublasStatus_t, cublasLtMatmulAlgoGetHeuristic,
                   (cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
                    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
                    int* returned),
                   (h, desc, Adesc, Bdesc, Cdesc, Ddesc, pref, requested, results, returned))
FSDP_LAZY_FUNCTION(CudaLibrary::CublasLt, cublasStatus_t, cublasLtMatmulDescCreate,
                   (cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale),
                   (desc, compute, scale))
FSDP_LAZY_FUNCTION(CudaLibrary::CublasLt, cublasStatus_t, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t d), (d))
FSDP_LAZY_FUNCTION(CudaLibrary::CublasLt, cublasStatus_t, cublasLtMatmulDescSetAttribute,
                   (cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const void* buf, size_t bytes),
                   (d, attr, buf, bytes))
FSDP_LAZY_FUNCTION(CudaLibrary::CublasLt, cublasStatus_t, cublasLtMatmulPreferenceCreate,
                   (cublasLtMatmulPreference_t* p), (p))
FSDP_LAZY_FUNCTION(CudaLibrary::CublasLt, cublasStatus_t, cublasLtMatmulPreferenceDestroy,
                   (cublasLtMatmulPreference_t p), (p))
FSDP_LAZY_FUNCTION(CudaLibrary::CublasLt, cublasStatus_t, cublasLtMatmulPreferenceSetAttribute,
                   (cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                    size_t bytes),
                   (p, attr, buf, bytes))
FSDP_LAZY_FUNCTION(CudaLibrary::CublasLt, cublasStatus_t, cublasLtMatrixLayoutCreate,
                   (cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld),
                   (l, type, rows, cols, ld))
FSDP_LAZY_FUNCTION(CudaLibrary::CublasLt, cublasStatus_t, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t l), (l))
FSDP_LAZY_FUNCTION(CudaLibrary::CublasLt, cublasStatus_t, cublasLtMatrixLayoutSetAttribute,
                   (cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, const void* buf, size_t bytes),
                   (l, attr, buf, bytes))
// clang-format on
#endif  // FSDP_CUDA_LOADS_LIBRARIES
