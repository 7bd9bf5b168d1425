// token_shard_fuzzer.cc: llm.c token shards (runtime/data/token_file.h) opened
// from a file, and samples read from them by global index, in file order or
// shuffled, with the vocabulary checked as read (runtime/data/data_loader.h).
// The input's first 11 bytes choose the read: seq_len (1 byte), sample count
// (the low 7 bits of 1 byte, at most 16; its top bit shuffles), vocab size (1
// byte, x 256) and the first sample index (8 bytes, any int64); the rest is
// the shard.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "runtime/data/data_loader.h"
#include "runtime/data/token_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace paraplan;
  constexpr size_t kChoices = 11;
  if (size < kChoices) return 0;
  const int seq_len = data[0] % 64;  // 0 is refused by the loader
  const int count = (data[1] & 0x7f) % 17;
  const bool shuffle = (data[1] & 0x80) != 0;
  const int vocab_size = (data[2] + 1) * 256;
  int64_t first_sample = 0;
  std::memcpy(&first_sample, data + 3, sizeof first_sample);
  static fuzz::MemoryFile file;
  const std::string& path = file.hold(data + kChoices, size - kChoices);
  fuzz::refused_clearly(path, [&] {
    const DataLoader loader({{path, 1.0}}, seq_len, vocab_size,
                            DataOrder{.shuffle = shuffle, .seed = 7}, "--data");
    std::vector<int32_t> inputs(static_cast<size_t>(count) * seq_len);
    std::vector<int32_t> targets(inputs.size());
    loader.load(first_sample, count, inputs.data(), targets.data());
    for (size_t i = 0; i + 1 < inputs.size(); ++i)
      if (inputs[i] >= vocab_size || targets[i] >= vocab_size)
        fuzz::fail("a sample holds a token the vocabulary check let through", path);
  });
  return 0;
}
