#include "common/tcp_liveness.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "common/parse_int.hpp"
#include "common/peer_tolerance.hpp"

namespace ddp {
namespace {

// The kernel's limits: MAX_TCP_KEEPIDLE, MAX_TCP_KEEPINTVL, MAX_TCP_KEEPCNT, and the range
// TCP_RTO_MAX_MS takes (1 s to TCP_RTO_MAX, 120 s).
constexpr int kMaxKeepSeconds = 32767;
constexpr int kMaxKeepCount = 127;
constexpr int kMinRtoMs = 1000;
constexpr int kMaxRtoMs = 120000;
// Resends of unacknowledged data at least once a second: a connection across a link that was
// cut carries bytes again within a second of its coming back, not after a doubled back-off.
constexpr int kRtoCapMs = 1000;

// Linux 6.15's TCP_RTO_MAX_MS, which older C libraries do not name.
#ifndef TCP_RTO_MAX_MS
constexpr int TCP_RTO_MAX_MS = 44;  // NOLINT(readability-identifier-naming): the kernel's name
#endif

// True when the variable is set and not empty (value then holds it).
bool override_from_env(const char* name, int& value, int64_t min, int64_t max) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return false;
  value = static_cast<int>(parse_int(name, text, min, max));
  return true;
}

// TCP_RTO_MAX_MS; false when the kernel does not know the option (before 6.15).
bool cap_resend_interval(int fd, int rto_max_ms) {
  if (::setsockopt(fd, IPPROTO_TCP, TCP_RTO_MAX_MS, &rto_max_ms, sizeof(rto_max_ms)) == 0) {
    return true;
  }
  if (errno == ENOPROTOOPT) return false;
  throw SocketError("setsockopt TCP_RTO_MAX_MS=" + std::to_string(rto_max_ms) +
                    " failed: " + errno_text(errno));
}

void set_option(int fd, int level, int option, const char* option_name, int value) {
  if (::setsockopt(fd, level, option, &value, sizeof(value)) != 0) {
    throw SocketError(std::string("setsockopt ") + option_name + "=" + std::to_string(value) +
                      " failed: " + errno_text(errno));
  }
}

}  // namespace

TcpLiveness tcp_liveness_for(std::chrono::milliseconds tolerance) {
  const int64_t tolerance_ms = std::max<int64_t>(tolerance.count(), 1000);
  TcpLiveness liveness;
  liveness.keepintvl_s = 1;
  // 1 or 2 s: an idle connection last heard from its peer at most that long before a
  // silence began, which TCP_USER_TIMEOUT (counted from then) must allow for.
  int idle = tolerance_ms >= 6000 ? 2 : 1;
  if (idle > 1) {
    thread_local std::minstd_rand random{std::random_device{}()};
    idle -= static_cast<int>(random() % 2U);
  }
  liveness.keepidle_s = idle;
  // What a silence adds before the connection hears its peer again: up to idle before it began,
  // then up to 2 s after it ends (the next probe or resend comes within a second, and a link
  // whose carrier comes back drops what it is given for up to a second more: Linux applies
  // carrier changes late).
  const int64_t allowance_ms = (idle + 2) * int64_t{1000};
  constexpr int64_t kLargest = std::numeric_limits<int>::max();
  liveness.user_timeout_ms = static_cast<int>(std::min(tolerance_ms + allowance_ms, kLargest));
  liveness.rto_max_ms = kRtoCapMs;
  liveness.user_timeout_uncapped_ms =
      static_cast<int>(std::min(2 * tolerance_ms + allowance_ms, kLargest));
  const int64_t seconds = (liveness.user_timeout_ms + 999) / 1000;
  liveness.keepcnt = static_cast<int>(std::clamp<int64_t>(seconds - idle, 1, kMaxKeepCount));
  return liveness;
}

TcpLiveness tcp_liveness_from_env() {
  TcpLiveness liveness = tcp_liveness_for(peer_tolerance_from_env());
  override_from_env(env::kTcpKeepIdle, liveness.keepidle_s, 1, kMaxKeepSeconds);
  override_from_env(env::kTcpKeepIntvl, liveness.keepintvl_s, 1, kMaxKeepSeconds);
  override_from_env(env::kTcpKeepCnt, liveness.keepcnt, 1, kMaxKeepCount);
  if (override_from_env(env::kTcpUserTimeout, liveness.user_timeout_ms, 0,
                        std::numeric_limits<int>::max())) {
    liveness.user_timeout_uncapped_ms = liveness.user_timeout_ms;
  }
  if (override_from_env(env::kTcpRtoMax, liveness.rto_max_ms, 0, kMaxRtoMs) &&
      liveness.rto_max_ms != 0 && liveness.rto_max_ms < kMinRtoMs) {
    throw ConfigError(std::string(env::kTcpRtoMax) + "='" + std::to_string(liveness.rto_max_ms) +
                      "': expected 0 (the kernel's) or an integer in [" +
                      std::to_string(kMinRtoMs) + ", " + std::to_string(kMaxRtoMs) + "]");
  }
  return liveness;
}

bool set_tcp_liveness(int fd, const TcpLiveness& liveness) {
  int protocol = 0;
  socklen_t length = sizeof(protocol);
  if (::getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &length) != 0 ||
      protocol != IPPROTO_TCP) {
    return false;  // a Unix socket, a pipe: the peer is on this host, no probes needed
  }
  // Timing first: keepalive then starts with it, not with the system-wide 2-hour default.
  set_option(fd, IPPROTO_TCP, TCP_KEEPIDLE, "TCP_KEEPIDLE", liveness.keepidle_s);
  set_option(fd, IPPROTO_TCP, TCP_KEEPINTVL, "TCP_KEEPINTVL", liveness.keepintvl_s);
  set_option(fd, IPPROTO_TCP, TCP_KEEPCNT, "TCP_KEEPCNT", liveness.keepcnt);
  set_option(fd, SOL_SOCKET, SO_KEEPALIVE, "SO_KEEPALIVE", 1);
  int user_timeout = liveness.user_timeout_ms;
  if (liveness.rto_max_ms > 0 && !cap_resend_interval(fd, liveness.rto_max_ms) &&
      liveness.user_timeout_uncapped_ms > 0) {
    user_timeout = liveness.user_timeout_uncapped_ms;
  }
  set_option(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, "TCP_USER_TIMEOUT", user_timeout);
  return true;
}

}  // namespace ddp
