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

# On core, PUBLIC: every module above it compiles against the stand-in headers too.
target_link_libraries(fsdp_core_lib PUBLIC fsdp_cuda_emu)
target_compile_definitions(fsdp_core_lib PUBLIC FSDP_WITH_CUDA=1 FSDP_CUDA_EMULATION=1)
# The CUDA tests link all of fsdp_lib built this way: the trainer, the FSDP engine and the
# checkpointer run on the emulated device too (tests/cuda_mpi/test_fsdp_cuda.cpp).

# ---- NCCL over MPI (issue 7): begin ---------------------------------------------------
# The NCCL stand-in (src/cuda_emu/nccl, semantics in src/cuda_emu/include/nccl.h) runs the
# collectives over MPI, so it is a library of its own: the single-process emulator above
# does not link MPI. With it the NCCL communicator (src/dist/cuda) builds and runs here.
add_library(fsdp_cuda_emu_nccl STATIC ${PROJECT_SOURCE_DIR}/src/cuda_emu/nccl/nccl.cpp
            ${PROJECT_SOURCE_DIR}/src/cuda_emu/nccl/nccl_p2p.cpp ${PROJECT_SOURCE_DIR}/src/cuda_emu/nccl/nccl_tcp.cpp)
target_compile_options(fsdp_cuda_emu_nccl PRIVATE -Wall -Wextra)
target_link_libraries(fsdp_cuda_emu_nccl PUBLIC fsdp_cuda_emu MPI::MPI_CXX)
target_link_libraries(fsdp_dist_lib PRIVATE fsdp_cuda_emu_nccl)
target_compile_definitions(fsdp_dist_lib PUBLIC FSDP_WITH_NCCL=1)

# ---- NCCL over MPI (issue 7): end -----------------------------------------------------

