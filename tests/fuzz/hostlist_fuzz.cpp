// libFuzzer target: the SLURM hostlist grammar (common/hostlist.hpp). Any text either expands
// (to at most kMaxHostlistHosts non-empty names, the first of which is first_host) or is
// refused with ConfigError.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/error.hpp"
#include "common/hostlist.hpp"

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry points are named so
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto hosts = ddp::expand_hostlist(text);
    if (hosts.size() > ddp::kMaxHostlistHosts) std::abort();
    for (const auto& host : hosts) {
      if (host.empty()) std::abort();
    }
    if (!hosts.empty() && ddp::first_host(text) != hosts.front()) std::abort();
  } catch (const ddp::ConfigError&) {
  }
  return 0;
}
