// libFuzzer target: --rdzv_conf and --rdzv_endpoint parsing (rendezvous/rdzv_conf.hpp). Any
// text parses or is refused with ConfigError; durations that parse are never negative.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/error.hpp"
#include "rendezvous/rdzv_conf.hpp"

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry points are named so
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto conf = ddp::rendezvous::parse_rdzv_conf(text);
    for (const auto& d : {conf.join_timeout, conf.last_call_timeout, conf.close_timeout,
                          conf.heartbeat_interval, conf.lease_timeout, conf.exit_barrier_timeout}) {
      if (d && d->count() < 0) std::abort();
    }
  } catch (const ddp::ConfigError&) {
  }
  try {
    const auto d = ddp::rendezvous::parse_duration("timeout", text);
    if (d.count() < 0) std::abort();
  } catch (const ddp::ConfigError&) {
  }
  try {
    (void)ddp::rendezvous::parse_endpoint(text, 29400);
  } catch (const ddp::ConfigError&) {
  }
  return 0;
}
