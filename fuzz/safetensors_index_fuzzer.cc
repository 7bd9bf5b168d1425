// safetensors_index_fuzzer.cc: model.safetensors.index.json
// (runtime/checkpoint/tensor_file_set.h), which a sharded checkpoint or a
// Hugging Face hub export holds: the index's validation (file names only in
// its own directory), then every tensor it names read from the two valid
// shards beside it (or refused: a shard it invents, a tensor a shard lacks).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "runtime/checkpoint/tensor_file_set.h"

namespace {

// A directory holding model-00001-of-00002 ("a", 2 floats) and
// model-00002-of-00002 ("b", 1 float), made once per process and removed
// at its exit.
struct ShardDirectory {
  ShardDirectory() {
    using namespace paraplan;
    std::filesystem::create_directories(path);
    const float a[2] = {1.0f, 2.0f}, b = 3.0f;
    SafetensorsWriter first, second;
    first.add("a", {2}, a);
    second.add("b", {1}, &b);
    first.write(path + "/" + shard_file_name("model", 1, 2));
    second.write(path + "/" + shard_file_name("model", 2, 2));
  }
  ~ShardDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("paraplan_index_fuzz_" + std::to_string(::getpid())))
                               .string();
};

const std::string& shard_directory() {
  static const ShardDirectory directory;
  return directory.path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace paraplan;
  const std::string& directory = shard_directory();
  const std::string index = directory + "/" + index_file_name("model");
  {
    std::ofstream out(index, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  fuzz::refused_clearly(index, [&] {
    const TensorFileSet set = TensorFileSet::open(directory, "model");
    for (const std::string& name : set.names()) {
      const std::vector<int64_t>& shape = set.shape(name);
      int64_t elements = 1;
      for (int64_t dim : shape) elements *= dim;
      std::vector<float> out(static_cast<size_t>(elements));
      set.read(name, out.data(), shape);
    }
  });
  return 0;
}
