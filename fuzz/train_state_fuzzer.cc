// train_state_fuzzer.cc: a checkpoint's train_state.json
// (runtime/checkpoint/checkpoint.h parse_train_state), and the same bytes as
// the checkpoint directory's 'latest' file, which must name a step directory
// inside it or be refused (resolve_checkpoint).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "fuzz/fuzz_support.h"
#include "runtime/checkpoint/checkpoint.h"

namespace {

namespace fs = std::filesystem;

// A checkpoint directory with one step directory, step_00000001, removed
// when the run ends.
struct CheckpointDirectory {
  CheckpointDirectory()
      : path(fs::temp_directory_path() /
             ("paraplan_train_state_fuzzer_" + std::to_string(::getpid()))) {
    fs::create_directories(path / "step_00000001");
    std::ofstream(path / "step_00000001" / "model.safetensors") << "x";
  }
  ~CheckpointDirectory() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  fs::path path;
};

const fs::path& checkpoint_directory() {
  static const CheckpointDirectory dir;
  return dir.path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace paraplan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::refused_clearly("train_state.json", [&] {
    const TrainState state = parse_train_state(text, "train_state.json");
    if (state.step < 0 || state.step > kMaxTrainStep || state.next_train_sample < 0 ||
        state.next_train_sample > kMaxTrainSample)
      fuzz::fail("a training state out of range was accepted", text);
  });
  const fs::path& dir = checkpoint_directory();
  std::ofstream(dir / "latest", std::ios::binary | std::ios::trunc) << text;
  fuzz::refused_clearly((dir / "latest").string(), [&] {
    const fs::path resolved = resolve_checkpoint(dir.string());
    if (resolved.parent_path() != dir)
      fuzz::fail("'latest' led outside the checkpoint directory", resolved.string());
  });
  return 0;
}
