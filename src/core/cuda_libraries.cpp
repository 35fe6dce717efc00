// Finding and loading cuBLASLt and NCCL at run time; see cuda_libraries.h.
#include "fsdp/core/cuda_libraries.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <set>
#include <system_error>

#include <fmt/ranges.h>

#include "fsdp/core/error.h"

#if !defined(FSDP_CUBLASLT_SONAME)
#define FSDP_CUBLASLT_SONAME "libcublasLt.so.13"
#endif
#if !defined(FSDP_NCCL_SONAME)
#define FSDP_NCCL_SONAME "libnccl.so.2"
#endif

namespace fsdp::cuda {
namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

std::vector<std::string> split_dirs(const std::string& list) {
  std::vector<std::string> dirs;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(':', start), list.size());
    if (end > start) dirs.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  return dirs;
}

// "13.0.2" from the library's own version call; "" when it has none (a stand-in, or too old).
std::string read_version(CudaLibrary id, void* handle) {
  if (id == CudaLibrary::CublasLt) {
    using Fn = size_t (*)();
    const auto fn = reinterpret_cast<Fn>(dlsym(handle, "cublasLtGetVersion"));
    if (fn == nullptr) return "";
    const size_t v = fn();  // major * 10000 + minor * 100 + patch
    return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
  }
  using Fn = int (*)(int*);
  const auto fn = reinterpret_cast<Fn>(dlsym(handle, "ncclGetVersion"));
  int v = 0;
  if (fn == nullptr || fn(&v) != 0) return "";
  return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);  // NCCL >= 2.9's encoding
}

// The file a handle from dlopen(soname) came from.
std::string loaded_path(void* handle, const std::string& fallback) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr && map->l_name[0] != '\0')
    return map->l_name;
  return fallback;
}

// One search in progress: tries places in order and records what each held.
class Search {
 public:
  explicit Search(const LibrarySpec& spec) { result_.spec = spec; }

  bool done() const { return result_.found(); }

  // Tries `dir`/soname; `source` names where dir came from in the record. A file already
  // tried under another name (CUDA_HOME=/usr/local/cuda, lib64 -> lib) is not tried again.
  void try_dir(const std::string& source, const std::string& dir) {
    if (done()) return;
    const fs::path file = fs::path(dir) / result_.spec.soname;
    std::error_code ec;
    const fs::path real = fs::weakly_canonical(file, ec);
    if (!ec && !tried_.insert(real.string()).second) return;
    if (!fs::exists(file, ec)) {
      note(source, fmt::format("{}: no {}", dir, result_.spec.soname));
      return;
    }
    load(source, file.string());
  }

  // Tries each folder of a ':'-separated list; an empty list is recorded as unset.
  void try_list(const std::string& source, const std::string& list) {
    if (done()) return;
    if (list.empty()) {
      note(source, "unset");
      return;
    }
    for (const std::string& dir : split_dirs(list)) try_dir(source, dir);
  }

  // The loader's own search by file name (ldconfig's cache and the default folders).
  void try_system() {
    if (done()) return;
    void* h = dlopen(result_.spec.soname.c_str(), RTLD_LAZY | RTLD_LOCAL);
    if (h == nullptr) {
      note("the system's library path", "not there");
      return;
    }
    take("the system's library path", loaded_path(h, result_.spec.soname), h);
  }

  // The nvidia/*/lib folders of a Python environment's wheels.
  void try_python(const std::string& python) {
    if (done()) return;
    const std::string source = "python3's nvidia wheels";
    if (python.empty()) {
      note(source, "not asked (FSDP_PYTHON is empty)");
      return;
    }
    std::string error;
    const std::vector<std::string> roots = nvidia_package_dirs(python, &error);
    if (roots.empty()) {
      note(source, error);
      return;
    }
    bool any = false;
    for (const std::string& root : roots) {
      std::error_code ec;
      for (const auto& entry : fs::directory_iterator(root, ec)) {
        const fs::path lib = entry.path() / "lib";
        if (!fs::exists(lib / result_.spec.soname, ec)) continue;
        any = true;
        load(source, (lib / result_.spec.soname).string());
        if (done()) return;
      }
    }
    if (!any) note(source, fmt::format("{} has no {} under {}", python, result_.spec.soname, fmt::join(roots, ", ")));
  }

  FoundLibrary result() && { return std::move(result_); }

 private:
  void note(const std::string& source, const std::string& what) {
    result_.looked_in.push_back(fmt::format("{} ({})", source, what));
  }

  void load(const std::string& source, const std::string& path) {
    dlerror();
    void* h = dlopen(path.c_str(), RTLD_LAZY | RTLD_LOCAL);
    if (h == nullptr) {
      const char* why = dlerror();
      note(source, fmt::format("{} does not load: {}", path, why != nullptr ? why : "unknown error"));
      return;
    }
    take(source, path, h);
  }

  void take(const std::string& source, const std::string& path, void* h) {
    result_.handle = h;
    result_.path = path;
    result_.source = source;
    result_.version = read_version(result_.spec.id, h);
  }

  // nvidia.__path__ of `python` (a namespace package: one folder per site-packages holding
  // nvidia wheels). Runs the interpreter; a missing one or a failed import says why in *error.
  static std::vector<std::string> nvidia_package_dirs(const std::string& python, std::string* error) {
    const std::string quoted = "'" + python + "'";  // a path from the environment, not a shell word
    if (python.find('\'') != std::string::npos) {
      *error = fmt::format("FSDP_PYTHON {} contains a quote", python);
      return {};
    }
    const std::string cmd = "timeout 30 " + quoted +
                            " -c 'import sys, nvidia; print(sys.executable); print(\"\\n\".join(nvidia.__path__))' "
                            "2>/dev/null";
    FILE* p = popen(cmd.c_str(), "r");
    if (p == nullptr) {
      *error = fmt::format("cannot run {}", python);
      return {};
    }
    std::vector<std::string> lines;
    char buf[4096];
    while (std::fgets(buf, sizeof buf, p) != nullptr) {
      std::string s(buf);
      while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
      if (!s.empty()) lines.push_back(s);
    }
    const int status = pclose(p);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (code == 127) {
      *error = fmt::format("no {} on PATH", python);
      return {};
    }
    if (code != 0 || lines.size() < 2) {
      *error = fmt::format("{} has no module nvidia", python);
      return {};
    }
    lines.erase(lines.begin());  // sys.executable: the interpreter's real path, unused
    return lines;
  }

  FoundLibrary result_;
  std::set<std::string> tried_;
};

}  // namespace

LibrarySpec library_spec(CudaLibrary id) {
  if (id == CudaLibrary::CublasLt) return {id, "cuBLASLt", FSDP_CUBLASLT_SONAME};
  return {id, "NCCL", FSDP_NCCL_SONAME};
}

LibrarySearch LibrarySearch::from_environment() {
  LibrarySearch s;
  s.fsdp_cuda_libs = env("FSDP_CUDA_LIBS");
  s.ld_library_path = env("LD_LIBRARY_PATH");
  s.cuda_home = env("CUDA_HOME").empty() ? env("CUDA_PATH") : env("CUDA_HOME");
  s.nccl_home = env("NCCL_HOME");
  if (std::getenv("FSDP_PYTHON") != nullptr) s.python = env("FSDP_PYTHON");
  return s;
}

FoundLibrary find_library(const LibrarySpec& spec, const LibrarySearch& where) {
  Search s(spec);
  s.try_list("FSDP_CUDA_LIBS", where.fsdp_cuda_libs);
  s.try_list("LD_LIBRARY_PATH", where.ld_library_path);
  if (spec.id == CudaLibrary::Nccl && !where.nccl_home.empty()) s.try_dir("NCCL_HOME", where.nccl_home + "/lib");
  if (where.cuda_home.empty()) {
    if (!s.done()) s.try_list("CUDA_HOME", "");
  } else {
    s.try_dir("CUDA_HOME", where.cuda_home + "/lib64");
    s.try_dir("CUDA_HOME", where.cuda_home + "/lib");
  }
  for (const std::string& dir : where.default_dirs) s.try_dir(dir, dir);
  if (where.system_path) s.try_system();
  s.try_python(where.python);
  return std::move(s).result();
}

std::string FoundLibrary::describe() const {
  if (found())
    return fmt::format("{} {} ({}, from {})", spec.what, version.empty() ? "(version unknown)" : version, path,
                       source);
  return fmt::format("{} ({}) not found; looked in {}", spec.what, spec.soname, fmt::join(looked_in, ", "));
}

std::string libraries_line(const std::vector<FoundLibrary>& libs) {
  std::vector<std::string> parts;
  const FoundLibrary* missing = nullptr;
  for (const FoundLibrary& l : libs) {
    parts.push_back(l.describe());
    if (!l.found() && missing == nullptr) missing = &l;
  }
  std::string line = fmt::format("CUDA libraries: {}", fmt::join(parts, "; "));
  if (missing != nullptr) {
    const std::string& so = missing->spec.soname;
    line += missing->spec.id == CudaLibrary::Nccl
                ? fmt::format(". Point FSDP_CUDA_LIBS at the folder holding {} (an NCCL install's lib, or the "
                              "nvidia/nccl/lib folder of PyTorch's pip wheels)", so)
                : fmt::format(". Point FSDP_CUDA_LIBS at the folder holding {} (the lib64 folder of a CUDA {} "
                              "toolkit, or the nvidia/cu{}/lib folder of PyTorch's pip wheels)",
                              so, so.substr(so.rfind('.') + 1), so.substr(so.rfind('.') + 1));
  }
  return line;
}

std::vector<CudaLibrary> libraries_used() {
#if defined(FSDP_CUDA_LOADS_LIBRARIES)
  return {CudaLibrary::CublasLt, CudaLibrary::Nccl};
#else
  return {};
#endif
}

const std::vector<FoundLibrary>& process_libraries() {
  static std::once_flag once;
  static std::vector<FoundLibrary> found;
  std::call_once(once, [] {
    const LibrarySearch where = LibrarySearch::from_environment();
    for (CudaLibrary id : libraries_used()) found.push_back(find_library(library_spec(id), where));
  });
  return found;
}

std::string process_libraries_line() {
  if (libraries_used().empty()) {
#if defined(FSDP_CUDA_EMULATION)
    return "CUDA libraries: none to load (the emulation build links the emulator's stand-ins)";
#else
    return "CUDA libraries: none to load (this build has no CUDA backend)";
#endif
  }
  return libraries_line(process_libraries());
}

void require_libraries() {
  for (const FoundLibrary& l : process_libraries())
    if (!l.found()) FSDP_FAIL("{}", process_libraries_line());
}

void* library_symbol(CudaLibrary id, const char* name) {
  for (const FoundLibrary& l : process_libraries()) {
    if (l.spec.id != id) continue;
    if (!l.found()) FSDP_FAIL("{}", process_libraries_line());
    void* fn = dlsym(l.handle, name);
    FSDP_CHECK(fn != nullptr, "{} {} at {} has no function {}: this fsdp_train needs a newer {}", l.spec.what,
               l.version, l.path, name, l.spec.what);
    return fn;
  }
  FSDP_FAIL("{} is not one of the libraries this build loads at run time", library_spec(id).what);
}

}  // namespace fsdp::cuda
