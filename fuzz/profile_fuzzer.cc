// profile_fuzzer.cc: profile.json (schema/profile_format.h): the reader for
// the "cpu" device, and the writer's text for what it accepted read back equal.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_support.h"
#include "schema/profile_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace paraplan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::refused_clearly("profile.json", [&] {
    const ProfileDocument document = parse_profile_document(text, "profile.json", "cpu");
    if (!document.device) return;
    const std::string written =
        profile_document_text({{"cpu", device_profile_json(*document.device)}});
    const ProfileDocument again = parse_profile_document(written, "profile.json", "cpu");
    if (!again.device ||
        device_profile_json(*again.device) != device_profile_json(*document.device))
      fuzz::fail("profile.json does not read back as written", written);
  });
  return 0;
}
