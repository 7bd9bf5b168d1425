// shared_library.h: a library opened (dlopen) on first use rather than
// linked, where linking costs every process (cuBLAS's static start-up,
// OpenBLAS's spinning threads): cuBLAS and cuDNN in kernels/cuda, OpenBLAS in
// kernels/cpu, CBC in planner/search. Opened by soname (LD_LIBRARY_PATH, the
// loader's cache), else from the folder the build found it in, and never
// closed; each failure is one line naming the library and the fix (or, for
// cuDNN, which the CUDA backend can do without, reported, not thrown). And, for
// the tests that check a library is not loaded at start-up, whether this
// process has it mapped. Users link ${CMAKE_DL_LIBS}.
#pragma once

#include <dlfcn.h>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace paraplan {

// who: what needs it ("the CPU backend"); fix: what to do when it is missing.
inline void* open_shared_library(const std::string& soname, const std::string& build_folder,
                                 const std::string& who, const std::string& fix) {
  if (void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
  const std::string first_error = dlerror();
  const std::string fallback = build_folder + "/" + soname;
  if (void* handle = dlopen(fallback.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
  throw std::runtime_error(who + " could not load " + soname + " (" + first_error + "; nor " +
                           fallback + "): " + fix);
}

// For a library whose absence is not an error (cuDNN: the CUDA backend
// falls back to its own kernels): soname from the library path, else from
// each folder in turn. nullptr when none loads, with every attempt's
// message in *error; never throws.
inline void* try_open_shared_library(const std::string& soname,
                                     const std::vector<std::string>& folders, std::string* error) {
  std::string messages;
  for (size_t i = 0; i <= folders.size(); ++i) {
    const std::string path = i == 0 ? soname : folders[i - 1] + "/" + soname;
    if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    const char* message = dlerror();
    if (i > 0) messages += "; ";
    messages += message != nullptr ? message : path + ": not loaded";
  }
  if (error != nullptr) *error = messages;
  return nullptr;
}

// Sets function to the library's symbol; throws naming it and `why` if absent.
template <typename Function>
void resolve_shared_function(void* library, const std::string& soname, const char* symbol,
                             Function& function, const std::string& who, const std::string& why) {
  function = reinterpret_cast<Function>(dlsym(library, symbol));
  if (function == nullptr)
    throw std::runtime_error(who + " found no " + symbol + " in " + soname + ": " + why);
}

// library.member = the symbol `member` names, macro-expanded first (cuBLAS's
// names are macros for their _v2 symbols); throws as resolve_shared_function.
#define PARAPLAN_SHARED_SYMBOL_TEXT(x) #x
#define PARAPLAN_SHARED_SYMBOL(x) PARAPLAN_SHARED_SYMBOL_TEXT(x)
#define PARAPLAN_RESOLVE_SHARED(handle, soname, library, member, who, why)            \
  ::paraplan::resolve_shared_function(handle, soname, PARAPLAN_SHARED_SYMBOL(member), \
                                      (library).member, who, why)

// The table of functions `Load` opens and resolves, made on first use and
// kept for the process; a failed load throws, and throws again at the next.
template <typename Library, Library (*Load)()>
const Library& loaded_once() {
  static const Library library = Load();
  return library;
}

// Whether a library whose path contains `name` is mapped into this process.
inline bool process_has_mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find(name) != std::string::npos;
}

}  // namespace paraplan
