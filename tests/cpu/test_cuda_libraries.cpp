// Finding cuBLASLt and NCCL at run time (fsdp/core/cuda_libraries.h), with stand-in libraries
// that only say their versions (tests/cpu/fake_cuda_libs, built beside this binary): the order
// of the places looked in, a file there that does not load, the Python wheels' folders, and
// the one line for found and for missing libraries.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "fsdp/core/cuda_libraries.h"
#if defined(FSDP_WITH_CUDA) && !defined(FSDP_CUDA_EMULATION)
#include <cublasLt.h>
#endif
#include "test_util.h"

namespace fsdp::cuda {
namespace {

namespace fs = std::filesystem;

const std::string kFakes = FSDP_FAKE_CUDA_LIBS_DIR;

// Nowhere: every place empty, no system search, no Python.
LibrarySearch nowhere() {
  LibrarySearch s;
  s.default_dirs = {"/nonexistent/cuda/lib64"};
  s.system_path = false;
  s.python = "";
  return s;
}

fs::path scratch(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("fsdp_cuda_libs_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TEST(CudaLibraries, FoundInFsdpCudaLibsWithTheirVersions) {
  LibrarySearch s = nowhere();
  s.fsdp_cuda_libs = "/nonexistent/first:" + kFakes;
  const FoundLibrary lt = find_library(library_spec(CudaLibrary::CublasLt), s);
  const FoundLibrary nccl = find_library(library_spec(CudaLibrary::Nccl), s);
  ASSERT_TRUE(lt.found()) << lt.describe();
  ASSERT_TRUE(nccl.found()) << nccl.describe();
  EXPECT_EQ(lt.source, "FSDP_CUDA_LIBS");
  EXPECT_EQ(lt.version, "99.1.2");
  EXPECT_EQ(nccl.version, "2.99.7");
  EXPECT_EQ(libraries_line({lt, nccl}),
            "CUDA libraries: cuBLASLt 99.1.2 (" + kFakes + "/libcublasLt.so.13, from FSDP_CUDA_LIBS); NCCL 2.99.7 (" +
                kFakes + "/libnccl.so.2, from FSDP_CUDA_LIBS)");
}

TEST(CudaLibraries, AFileThatDoesNotLoadIsSkippedAndSaid) {
  const fs::path broken = scratch("broken");
  std::ofstream(broken / "libcublasLt.so.13") << "not a library";
  LibrarySearch s = nowhere();
  s.fsdp_cuda_libs = broken.string();
  s.ld_library_path = kFakes;
  const FoundLibrary lt = find_library(library_spec(CudaLibrary::CublasLt), s);
  ASSERT_TRUE(lt.found());
  EXPECT_EQ(lt.source, "LD_LIBRARY_PATH");
  ASSERT_EQ(lt.looked_in.size(), 1u);
  EXPECT_NE(lt.looked_in[0].find("FSDP_CUDA_LIBS (" + (broken / "libcublasLt.so.13").string() + " does not load: "),
            std::string::npos)
      << lt.looked_in[0];
  fs::remove_all(broken);
}

TEST(CudaLibraries, CudaHomeAndThePythonWheelsFolders) {
  const fs::path home = scratch("home");
  fs::create_directories(home / "lib64");
  fs::copy_file(kFakes + "/libcublasLt.so.13", home / "lib64" / "libcublasLt.so.13");
  LibrarySearch s = nowhere();
  s.cuda_home = home.string();
  FoundLibrary lt = find_library(library_spec(CudaLibrary::CublasLt), s);
  EXPECT_EQ(lt.source, "CUDA_HOME");
  EXPECT_EQ(lt.path, (home / "lib64" / "libcublasLt.so.13").string());

  // A Python whose nvidia package holds NCCL's wheel (nvidia/nccl/lib), as PyTorch's does.
  const fs::path py = scratch("python");
  fs::create_directories(py / "site" / "nvidia" / "nccl" / "lib");
  fs::copy_file(kFakes + "/libnccl.so.2", py / "site" / "nvidia" / "nccl" / "lib" / "libnccl.so.2");
  std::ofstream(py / "python3") << "#!/bin/sh\necho " << (py / "python3").string() << "\necho "
                                << (py / "site" / "nvidia").string() << "\n";
  fs::permissions(py / "python3", fs::perms::owner_all);
  s = nowhere();
  s.python = (py / "python3").string();
  const FoundLibrary nccl = find_library(library_spec(CudaLibrary::Nccl), s);
  ASSERT_TRUE(nccl.found()) << nccl.describe();
  EXPECT_EQ(nccl.source, "python3's nvidia wheels");
  EXPECT_EQ(nccl.path, (py / "site" / "nvidia" / "nccl" / "lib" / "libnccl.so.2").string());
  fs::remove_all(home);
  fs::remove_all(py);
}

TEST(CudaLibraries, MissingLibraryLineSaysEveryPlaceLookedAndWhatToDo) {
  LibrarySearch s = nowhere();
  s.python = "/nonexistent/bin/python3";
  const FoundLibrary lt = find_library(library_spec(CudaLibrary::CublasLt), s);
  EXPECT_FALSE(lt.found());
  EXPECT_EQ(libraries_line({lt}),
            "CUDA libraries: cuBLASLt (libcublasLt.so.13) not found; looked in FSDP_CUDA_LIBS (unset), LD_LIBRARY_PATH "
            "(unset), CUDA_HOME (unset), /nonexistent/cuda/lib64 (/nonexistent/cuda/lib64: no libcublasLt.so.13), "
            "python3's nvidia wheels (no /nonexistent/bin/python3 on PATH). Point FSDP_CUDA_LIBS at the folder holding "
            "libcublasLt.so.13 (the lib64 folder of a CUDA 13 toolkit, or the nvidia/cu13/lib folder of PyTorch's pip "
            "wheels)");
}

TEST(CudaLibraries, ThisBuildsOwnLine) {
  if (libraries_used().empty()) {
    EXPECT_EQ(process_libraries_line().rfind("CUDA libraries: none to load (", 0), 0u) << process_libraries_line();
    EXPECT_NO_THROW(require_libraries());
  } else {
    EXPECT_EQ(process_libraries().size(), libraries_used().size());
    EXPECT_EQ(process_libraries_line().rfind("CUDA libraries: cuBLASLt ", 0), 0u) << process_libraries_line();
  }
}

#if defined(FSDP_WITH_CUDA) && !defined(FSDP_CUDA_EMULATION)
// The real CUDA build's forwarders (src/ops/cuda/cublaslt_loader.cpp, fsdp/core/lazy_symbol.h)
// reach the cuBLASLt this process found, with a call that needs no GPU.
TEST(CudaLibraries, ForwardersCallTheLoadedLibrary) {
  if (!process_libraries().at(0).found()) GTEST_SKIP() << process_libraries_line();
  EXPECT_STREQ(cublasLtGetStatusName(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
  EXPECT_STREQ(cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
}
#endif

}  // namespace
}  // namespace fsdp::cuda
