// Defining a function of a run-time-loaded CUDA library (cuBLASLt, NCCL) as a forwarder to
// the real one, resolved on its first call through cuda::library_symbol (cuda_libraries.h).
// The real CUDA build links neither library; the files that define these forwarders
// (src/ops/cuda/cublaslt_loader.cpp, src/dist/cuda/nccl_loader.cpp) list every function the
// code calls, and a call to one that is missing there fails the link, naming it: add a line.
//
//   FSDP_LAZY_FUNCTION(CudaLibrary::Nccl, ncclResult_t, ncclCommDestroy, (ncclComm_t comm), (comm))
//
// The type comes from the library's own header (decltype), so a parameter list that does not
// match its declaration fails to compile instead of corrupting a call.
#pragma once

#include "fsdp/core/cuda_libraries.h"

#define FSDP_LAZY_FUNCTION(library, ret, name, params, args)                                       \
  extern "C" ret name params {                                                                     \
    using fsdp_lazy_fn_t = decltype(&::name);                                                      \
    static const fsdp_lazy_fn_t fn =                                                               \
        reinterpret_cast<fsdp_lazy_fn_t>(::fsdp::cuda::library_symbol(::fsdp::cuda::library, #name)); \
    return fn args;                                                                                \
  }
