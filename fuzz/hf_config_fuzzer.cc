// hf_config_fuzzer.cc: a checkpoint's config.json (GPT2Config, LlamaConfig, MistralConfig,
// Qwen2Config; runtime/checkpoint/checkpoint.h parse_checkpoint_config), then the whole model's
// layout every accepted config makes, and config.json written back and read again giving the same
// model.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_support.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/model/architecture.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace paraplan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::refused_clearly("config.json", [&] {
    const TransformerConfig config = parse_checkpoint_config(text, "config.json");
    (void)make_whole_model_layout(config)->num_elements();
    const TransformerConfig again =
        parse_checkpoint_config(hugging_face_config(config).dump(), "config.json");
    if (!config_differences(config, again).empty())
      fuzz::fail("config.json does not read back as written", hugging_face_config(config).dump());
  });
  return 0;
}
