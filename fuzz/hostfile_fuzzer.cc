// hostfile_fuzzer.cc: `paraplan launch --hostfile` (launcher/launch.h): the
// hostfile's lines, then its check against a 2-node x 4-device mesh.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_support.h"
#include "launcher/launch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace paraplan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::refused_clearly(
      "hosts",
      [&] {
        const std::vector<HostEntry> hosts = parse_hostfile_text(text, "hosts");
        for (const HostEntry& host : hosts)
          if (host.slots < 1 || host.name.empty())
            fuzz::fail("a host without slots was accepted", text);
        check_hosts_match_mesh(hosts, "hosts", 2, 4);
      },
      fuzz::Text::kAsGiven);
  return 0;
}
