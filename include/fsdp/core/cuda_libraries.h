// Finding the CUDA libraries the real CUDA backend loads when a GPU run needs them: cuBLASLt
// (libcublasLt.so.13, about 500 MB) and NCCL (libnccl.so.2). Neither is linked: a CPU run,
// `--version` or `plan` never maps them (under a small `ulimit -v` the loader itself failed on
// cuBLASLt), and the relocatable package (scripts/package.sh) runs wherever a node has them in
// any of the usual places. The CUDA runtime is linked in statically (as nvcc links by default)
// and loads the driver (libcuda.so.1) itself on its first call.
//
// Where each library is looked for, in this order; the first file that loads wins:
//   1. FSDP_CUDA_LIBS        folders (':'-separated) the user names: the explicit override
//   2. LD_LIBRARY_PATH       its folders, as the loader would
//   3. CUDA_HOME             $CUDA_HOME/lib64 and /lib (and $NCCL_HOME/lib for NCCL)
//   4. /usr/local/cuda       lib64 and lib
//   5. the system            the loader's own search (ldconfig's cache, /usr/lib/...)
//   6. python3's wheels      the nvidia/*/lib folders of `python3 -c 'import nvidia'` (PyTorch's
//                            nvidia-cublas and nvidia-nccl wheels: nvidia/cu13/lib, nvidia/nccl/lib);
//                            FSDP_PYTHON names another interpreter
// and the answer is one line: which file of which version came from where, or, for a library
// that is missing, every place looked and what was there.
//
// Builds: the real CUDA build (FSDP_CUDA) resolves the cuBLASLt and NCCL functions it calls
// through cuda_library_symbol (src/ops/cuda/cublaslt_loader.cpp, src/dist/cuda/nccl_loader.cpp);
// the emulation build links its stand-ins and a CPU build has neither, so for them
// libraries_used() is empty. The search itself works in every build (tests/cpu drive it with
// stand-in libraries).
#pragma once

#include <string>
#include <vector>

namespace fsdp::cuda {

enum class CudaLibrary { CublasLt, Nccl };

// A library to find: its name for people and the file name the loader knows it by.
struct LibrarySpec {
  CudaLibrary id;
  std::string what;    // "cuBLASLt"
  std::string soname;  // "libcublasLt.so.13"
};
// The file names this build was compiled against (the toolkit's major version); defaults
// libcublasLt.so.13 and libnccl.so.2 where the build says nothing.
LibrarySpec library_spec(CudaLibrary id);

// Where to look (see the file comment); from_environment() reads the variables above.
struct LibrarySearch {
  std::string fsdp_cuda_libs;   // FSDP_CUDA_LIBS
  std::string ld_library_path;  // LD_LIBRARY_PATH
  std::string cuda_home;        // CUDA_HOME, else CUDA_PATH
  std::string nccl_home;        // NCCL_HOME
  std::vector<std::string> default_dirs{"/usr/local/cuda/lib64", "/usr/local/cuda/lib"};
  bool system_path = true;      // try the loader's own search
  std::string python = "python3";  // FSDP_PYTHON; empty: do not ask Python
  static LibrarySearch from_environment();
};

// What one search found. Loaded (dlopen) when found; never unloaded.
struct FoundLibrary {
  LibrarySpec spec;
  std::string path;     // the file that loaded; empty when not found
  std::string source;   // where it came from: "FSDP_CUDA_LIBS", "CUDA_HOME", "python3's nvidia wheels", ...
  std::string version;  // as the library reports it: "13.0.2"
  std::vector<std::string> looked_in;  // each place tried before it, with what was there
  void* handle = nullptr;

  bool found() const { return handle != nullptr; }
  // "cuBLASLt 13.0.2 (/usr/local/cuda/lib64/libcublasLt.so.13, from CUDA_HOME)", or
  // "cuBLASLt (libcublasLt.so.13) not found; looked in FSDP_CUDA_LIBS (unset), ..."
  std::string describe() const;
};

FoundLibrary find_library(const LibrarySpec& spec, const LibrarySearch& where);

// The one line for a set of libraries: "CUDA libraries: <each described>", ending, when one
// is missing, with what to do about it.
std::string libraries_line(const std::vector<FoundLibrary>& libs);

// ---- this process ----

// The libraries this build loads at run time (empty for the emulation and CPU builds).
std::vector<CudaLibrary> libraries_used();
// Searched once, on first call, from the environment; the line for this build ("CUDA
// libraries: none to load (...)" when it loads none).
const std::vector<FoundLibrary>& process_libraries();
std::string process_libraries_line();
// Throws fsdp::Error with process_libraries_line() when one of them is missing.
void require_libraries();
// A function of a loaded library, for the loaders of the CUDA build; throws (as
// require_libraries, or naming the symbol and the file that lacks it) when it cannot.
void* library_symbol(CudaLibrary id, const char* name);

}  // namespace fsdp::cuda
