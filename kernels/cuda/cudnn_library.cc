// cudnn_library.cc: the dlopen of libcudnn.so.9 for cuDNN's SDPA, and the
// cuDNN frontend's library handle (cudnn_library.h); and the attention
// notices' one line each (log_attention_notice, cuda_kernels.cuh). Without
// the frontend's headers (PARAPLAN_HAVE_CUDNN_FRONTEND unset) cuDNN is
// reported unavailable, nothing is opened, and make_cudnn_attention
// (cudnn_attention.cc, not built then) is the stub below.
#include "kernels/cuda/cudnn_library.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <glob.h>
#include <link.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/shared_library.h"
#include "kernels/cuda/cuda_kernels.cuh"
#include "kernels/cuda/cudnn_attention.h"

#if PARAPLAN_HAVE_CUDNN_FRONTEND
#include <cudnn_version.h>

// The frontend's handle (cudnn_frontend_shim.h, NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING):
// "cudnn package initialization set this global handle". Set once, below.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend
#endif

namespace paraplan::kernels::cuda {

namespace {

#if PARAPLAN_HAVE_CUDNN_FRONTEND
const std::string kSoname = "libcudnn.so." + std::to_string(CUDNN_MAJOR);

// The runtime the frontend's own CUDA calls go to: ours (cudnn_library.h).
// Set while static objects are built, before main, when the process has one
// thread: setenv beside another thread's getenv (MPI's, the watchdog's) is
// undefined behaviour, and the first attention call comes after MPI_Init.
[[maybe_unused]] const bool kCudartNameSet =
    setenv("CUDNN_FRONTEND_CUDART_LIB_NAME",
           ("libcudart.so." + std::to_string(CUDART_VERSION / 1000)).c_str(),
           /*overwrite=*/0) == 0;

// The site-packages folders of the Python environments the process names.
std::vector<std::string> wheel_folders() {
  std::vector<std::string> patterns;
  for (const char* variable : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
    if (const char* prefix = std::getenv(variable); prefix != nullptr && *prefix != '\0')
      patterns.push_back(std::string(prefix) + "/lib/python3*/site-packages/nvidia/cudnn/lib");
  }
  if (const char* path = std::getenv("PYTHONPATH"); path != nullptr) {
    const std::string entries(path);
    size_t start = 0;
    while (start <= entries.size()) {
      const size_t end = std::min(entries.find(':', start), entries.size());
      if (end > start) patterns.push_back(entries.substr(start, end - start) + "/nvidia/cudnn/lib");
      start = end + 1;
    }
  }
  std::vector<std::string> folders;
  for (const std::string& pattern : patterns) {
    glob_t found{};
    if (glob(pattern.c_str(), GLOB_NOSORT, nullptr, &found) == 0) {
      for (size_t i = 0; i < found.gl_pathc; ++i) folders.emplace_back(found.gl_pathv[i]);
    }
    globfree(&found);
  }
  return folders;
}

// The file a handle was loaded from.
std::string loaded_path(void* handle) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
      *map->l_name != '\0')
    return map->l_name;
  return kSoname;
}

std::string version_text(size_t version) {
  // cuDNN 9: major * 10000 + minor * 100 + patch.
  return std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
         std::to_string(version % 100);
}

using GetVersion = size_t (*)();

CudnnAvailability load() {
  std::string error;
  void* handle = nullptr;
  if (const char* file = std::getenv("PARAPLAN_CUDNN_LIBRARY"); file != nullptr && *file != '\0') {
    handle = dlopen(file, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* message = dlerror();
      return {false, "PARAPLAN_CUDNN_LIBRARY=" + std::string(file) + " does not load (" +
                         (message != nullptr ? message : "dlopen failed") + ")"};
    }
  } else {
    std::vector<std::string> folders{PARAPLAN_CUDNN_LIBRARY_DIR};
    for (std::string& folder : wheel_folders()) folders.push_back(std::move(folder));
    handle = try_open_shared_library(kSoname, folders, &error);
    if (handle == nullptr)
      return {false, kSoname + " not found (" + error +
                         "); install cuDNN 9 (PyTorch's wheel nvidia-cudnn-cu13 has it) or add "
                         "its folder to LD_LIBRARY_PATH"};
  }
  const auto get_version = reinterpret_cast<GetVersion>(dlsym(handle, "cudnnGetVersion"));
  if (get_version == nullptr) return {false, loaded_path(handle) + " has no cudnnGetVersion"};
  const size_t version = get_version();
  if (version / 10000 != CUDNN_MAJOR) {
    return {false, loaded_path(handle) + " is cuDNN " + version_text(version) +
                       "; paraplan was built against cuDNN " + std::to_string(CUDNN_MAJOR)};
  }
  cudnn_frontend::cudnn_dlhandle = handle;
  return {true, "cuDNN " + version_text(version) + " (" + loaded_path(handle) + ")"};
}
#else
CudnnAvailability load() {
  return {false,
          "this paraplan was built without the cuDNN frontend's headers (run "
          "scripts/fetch_cudnn_frontend.sh, then configure again)"};
}
#endif

}  // namespace

#if !PARAPLAN_HAVE_CUDNN_FRONTEND
std::unique_ptr<CudnnAttention> make_cudnn_attention(cudaStream_t) {
  throw std::runtime_error("cuDNN's SDPA is not available: " + load().description);
}

std::string validate_cudnn_attention_graphs(const AttentionShapeKey&, int) {
  return "cuDNN is not available: " + load().description;
}
#endif

void log_attention_notice(const std::string& line) {
  static std::mutex mutex;
  static std::set<std::string> said;
  const std::lock_guard<std::mutex> lock(mutex);
  if (said.insert(line).second) spdlog::info("{}", line);
}

const CudnnAvailability& cudnn_availability() {
  static const CudnnAvailability availability = load();
  return availability;
}

std::string cudnn_status_string(int status) {
#if PARAPLAN_HAVE_CUDNN_FRONTEND
  if (cudnn_availability().available) {
    using ErrorString = const char* (*)(int);
    static const auto error_string =
        reinterpret_cast<ErrorString>(dlsym(cudnn_frontend::cudnn_dlhandle, "cudnnGetErrorString"));
    if (error_string != nullptr) return error_string(status);
  }
#endif
  return "cuDNN status " + std::to_string(status);
}

}  // namespace paraplan::kernels::cuda
