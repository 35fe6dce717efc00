# The emulation build of the CUDA backend (FSDP_CUDA_EMULATION; see the top-level
# CMakeLists.txt and tests/README.md). The backend's .cu files are compiled as C++ with the
# stand-in cuda_runtime.h force-included, as nvcc force-includes the real one; the
# stand-in headers in src/cuda_emu/include come before every other include directory, so
# <cuda_runtime.h>, <cuda_bf16.h>, ... resolve to them and no CUDA toolkit is needed.

file(GLOB FSDP_CUDA_EMU_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/cuda_emu/*.cpp)
add_library(fsdp_cuda_emu STATIC ${FSDP_CUDA_EMU_SOURCES})
target_include_directories(fsdp_cuda_emu BEFORE PUBLIC ${PROJECT_SOURCE_DIR}/src/cuda_emu/include)
target_compile_options(fsdp_cuda_emu PRIVATE -Wall -Wextra)
target_link_libraries(fsdp_cuda_emu PUBLIC Threads::Threads)

foreach(cu IN LISTS FSDP_CUDA_SOURCES)
  if(cu MATCHES "\\.cu$")
    set_source_files_properties(${cu} PROPERTIES LANGUAGE CXX COMPILE_OPTIONS "-include;cuda_runtime.h")
  endif()
endforeach()

target_link_libraries(fsdp_lib PUBLIC fsdp_cuda_emu)
target_compile_definitions(fsdp_lib PUBLIC FSDP_WITH_CUDA=1 FSDP_CUDA_EMULATION=1)

# What the CUDA tests link in the emulation build: the tensor core and the op set (the
# CPU reference and the CUDA kernels) with the emulator, not all of fsdp_lib, so CI's ASan
# build compiles only what those tests run. (The whole fsdp_lib also builds for the
# emulator, for the trainer and the other tests, when asked for.)
file(GLOB_RECURSE FSDP_CUDA_BACKEND_SOURCES CONFIGURE_DEPENDS
     ${PROJECT_SOURCE_DIR}/src/core/*.cpp ${PROJECT_SOURCE_DIR}/src/ops/*.cpp ${PROJECT_SOURCE_DIR}/src/ops/*.cu)
add_library(fsdp_cuda_backend OBJECT ${FSDP_CUDA_BACKEND_SOURCES})
target_include_directories(fsdp_cuda_backend PUBLIC ${PROJECT_SOURCE_DIR}/include ${FSDP_CBLAS_INCLUDE})
target_compile_options(fsdp_cuda_backend PRIVATE -Wall -Wextra -fno-math-errno ${FSDP_ARCH_FLAGS})
target_compile_definitions(fsdp_cuda_backend PUBLIC FSDP_WITH_CUDA=1 FSDP_CUDA_EMULATION=1)
target_link_libraries(fsdp_cuda_backend PUBLIC fsdp_cuda_emu OpenMP::OpenMP_CXX Threads::Threads fmt::fmt ${FSDP_BLAS_LIB})

# ---- NCCL over MPI (issue 7): begin ---------------------------------------------------
# The NCCL stand-in (src/cuda_emu/nccl, semantics in src/cuda_emu/include/nccl.h) runs the
# collectives over MPI, so it is a library of its own: the single-process emulator above
# does not link MPI. With it the NCCL communicator (src/dist/cuda) builds and runs here.
add_library(fsdp_cuda_emu_nccl STATIC ${PROJECT_SOURCE_DIR}/src/cuda_emu/nccl/nccl.cpp)
target_compile_options(fsdp_cuda_emu_nccl PRIVATE -Wall -Wextra)
target_link_libraries(fsdp_cuda_emu_nccl PUBLIC fsdp_cuda_emu MPI::MPI_CXX)
target_link_libraries(fsdp_lib PUBLIC fsdp_cuda_emu_nccl)
target_compile_definitions(fsdp_lib PUBLIC FSDP_WITH_NCCL=1)

# What the NCCL tests (tests/cuda_mpi) link beside fsdp_cuda_backend: the communicators
# and their bootstrap (src/dist, which needs only core and ops), not all of fsdp_lib.
file(GLOB FSDP_CUDA_DIST_SOURCES CONFIGURE_DEPENDS
     ${PROJECT_SOURCE_DIR}/src/dist/*.cpp ${PROJECT_SOURCE_DIR}/src/dist/cuda/*.cpp)
add_library(fsdp_cuda_dist OBJECT ${FSDP_CUDA_DIST_SOURCES})
target_compile_options(fsdp_cuda_dist PRIVATE -Wall -Wextra ${FSDP_ARCH_FLAGS})
target_compile_definitions(fsdp_cuda_dist PUBLIC FSDP_WITH_NCCL=1)
target_link_libraries(fsdp_cuda_dist PUBLIC fsdp_cuda_backend fsdp_cuda_emu_nccl MPI::MPI_CXX)
# ---- NCCL over MPI (issue 7): end -----------------------------------------------------

# ---- model on CUDA (issue 7): begin ---------------------------------------------------
# The Llama model on a CUDA device (tests/cuda/test_cuda_llama*.cpp): the model sources
# and what the golden Hugging Face test loads its fixture with (safetensors and the HF
# import) join the set the CUDA tests link, still not all of fsdp_lib.
file(GLOB FSDP_CUDA_MODEL_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/model/*.cpp)
target_sources(fsdp_cuda_backend PRIVATE ${FSDP_CUDA_MODEL_SOURCES}
               ${PROJECT_SOURCE_DIR}/src/ckpt/safetensors.cpp ${PROJECT_SOURCE_DIR}/src/ckpt/durable_file.cpp
               ${PROJECT_SOURCE_DIR}/src/ckpt/hf_import.cpp)
target_link_libraries(fsdp_cuda_backend PUBLIC nlohmann_json::nlohmann_json ZLIB::ZLIB)
# ---- model on CUDA (issue 7): end -----------------------------------------------------
