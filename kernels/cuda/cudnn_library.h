// cudnn_library.h: libcudnn.so.9, opened (dlopen) the first time attention
// asks for cuDNN's SDPA, never linked, never required: where it is missing
// the CUDA backend runs its own attention kernels and says so in one line
// (attention_choice.h). The cuDNN frontend (header-only, built with
// NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING) calls every cuDNN function through
// dlsym on the handle cudnn_frontend::cudnn_dlhandle, which this sets to the
// library opened here (common/shared_library.h), so there is one libcudnn
// and one search for it:
//   1. PARAPLAN_CUDNN_LIBRARY, a path to the library file, when set (and
//      nothing else: a wrong path reports, it does not search on);
//   2. libcudnn.so.9 by soname: LD_LIBRARY_PATH, the loader's cache, or one
//      already in the process (PyTorch's);
//   3. the folder the build found it in (the CUDA toolkit's, here);
//   4. PyTorch's wheel, nvidia/cudnn/lib under the site-packages of
//      $VIRTUAL_ENV, $CONDA_PREFIX and of each $PYTHONPATH entry's parent.
// cuDNN 9 opens its own sub-libraries (libcudnn_graph, the engines) from the
// folder it was loaded from. The frontend also opens libcudart by soname for
// the few runtime calls it makes; CUDNN_FRONTEND_CUDART_LIB_NAME, when unset,
// is set to the CUDA runtime paraplan was built with, so two runtimes on the
// path cannot make it pick the other. Internal to kernels/cuda.
#pragma once

#include "kernels/cuda/attention_choice.h"

namespace paraplan::kernels::cuda {

// Loads cuDNN on the first call (thread-safe) and returns what happened, the
// same on every later call: available with "cuDNN 9.19.0 (path)", or not,
// with why (not built with the frontend's headers, not found, the wrong major
// version). Never throws.
const CudnnAvailability& cudnn_availability();

// cuDNN's message for a status (cudnnGetErrorString through the loaded
// library), or the number when cuDNN is not loaded.
std::string cudnn_status_string(int status);

}  // namespace paraplan::kernels::cuda
