#include "rendezvous/store/server/server_limits.hpp"

#include <cstdlib>

#include "common/env_names.hpp"
#include "common/parse_int.hpp"

namespace ddp::rendezvous {
namespace {

int64_t from_env(const char* name, int64_t fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  return parse_int(name, value, 1, kIntMax);
}

std::string limit_text(const char* flag, const char* variable) {
  return std::string("(limit: ddpstore ") + flag + " / " + variable + ")";
}

}  // namespace

ServerLimits resolve_limits(const ServerLimits& given) {
  ServerLimits out = given;
  if (out.max_conns_per_peer == 0) {
    out.max_conns_per_peer = static_cast<size_t>(
        from_env(env::kStoreMaxConnsPerPeer, static_cast<int64_t>(kDefaultMaxConnsPerPeer)));
  }
  if (out.max_bytes == 0) {
    out.max_bytes = static_cast<size_t>(
        from_env(env::kStoreMaxBytes, static_cast<int64_t>(kDefaultMaxStoreBytes)));
  }
  if (out.max_keys == 0) {
    out.max_keys = static_cast<size_t>(
        from_env(env::kStoreMaxKeys, static_cast<int64_t>(kDefaultMaxStoreKeys)));
  }
  if (out.frame_timeout.count() <= 0) {
    out.frame_timeout = std::chrono::milliseconds(
        from_env(env::kStoreFrameTimeoutMs, kDefaultFrameTimeout.count()));
  }
  return out;
}

std::string limit_conns_per_peer_text() {
  return limit_text("--max-conns-per-peer", env::kStoreMaxConnsPerPeer);
}
std::string limit_bytes_text() {
  return limit_text("--max-bytes", env::kStoreMaxBytes);
}
std::string limit_keys_text() {
  return limit_text("--max-keys", env::kStoreMaxKeys);
}
std::string limit_frame_timeout_text() {
  return limit_text("--frame-timeout-ms", env::kStoreFrameTimeoutMs);
}

}  // namespace ddp::rendezvous
