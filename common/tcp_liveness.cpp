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

// The kernel's limits: MAX_TCP_KEEPIDLE, MAX_TCP_KEEPINTVL, MAX_TCP_KEEPCNT.
constexpr int kMaxKeepSeconds = 32767;
constexpr int kMaxKeepCount = 127;

void override_from_env(const char* name, int& value, int64_t min, int64_t max) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return;
  value = static_cast<int>(parse_int(name, text, min, max));
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
  const int64_t seconds = std::min<int64_t>((tolerance_ms + 999) / 1000, kMaxKeepSeconds);
  TcpLiveness liveness;
  liveness.user_timeout_ms =
      static_cast<int>(std::min<int64_t>(tolerance_ms, std::numeric_limits<int>::max()));
  liveness.keepintvl_s = 1;
  int idle = static_cast<int>(std::max<int64_t>(seconds / 3, 1));
  if (idle >= 4) {
    thread_local std::minstd_rand random{std::random_device{}()};
    idle -= static_cast<int>(random() % static_cast<unsigned>(idle / 4 + 1));
  }
  liveness.keepidle_s = idle;
  liveness.keepcnt = static_cast<int>(std::clamp<int64_t>(seconds - idle, 1, kMaxKeepCount));
  return liveness;
}

TcpLiveness tcp_liveness_from_env() {
  TcpLiveness liveness = tcp_liveness_for(peer_tolerance_from_env());
  override_from_env(env::kTcpKeepIdle, liveness.keepidle_s, 1, kMaxKeepSeconds);
  override_from_env(env::kTcpKeepIntvl, liveness.keepintvl_s, 1, kMaxKeepSeconds);
  override_from_env(env::kTcpKeepCnt, liveness.keepcnt, 1, kMaxKeepCount);
  override_from_env(env::kTcpUserTimeout, liveness.user_timeout_ms, 0,
                    std::numeric_limits<int>::max());
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
  set_option(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, "TCP_USER_TIMEOUT", liveness.user_timeout_ms);
  return true;
}

}  // namespace ddp
