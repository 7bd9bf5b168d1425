// safetensors_fuzzer.cc: model.safetensors and optimizer.safetensors
// (runtime/checkpoint/safetensors.h): the header's validation, then every
// tensor it accepts read as floats (those of a float dtype and at most 2^20
// elements).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "runtime/checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace paraplan;
  static fuzz::MemoryFile file;
  const std::string& path = file.hold(data, size);
  fuzz::refused_clearly(path, [&] {
    const SafetensorsFile tensors = SafetensorsFile::open(path);
    for (const SafetensorsTensor& tensor : tensors.tensors()) {
      const int64_t elements = tensor.num_elements();
      if (elements < 0 || elements > (1 << 20)) continue;
      std::vector<float> out(static_cast<size_t>(elements));
      tensors.read(tensor.name, out.data(), tensor.shape);
    }
  });
  return 0;
}
