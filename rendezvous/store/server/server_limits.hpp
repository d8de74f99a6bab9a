#pragma once
// The limits that keep one store server bounded when a client misbehaves (a scanner, a
// slow-loris, a flood of keys), with defaults generous for a real job. docs/security.md ("Limits")
// has the figures. Every limit is named in the log line of the connection it closes.
#include <chrono>
#include <cstddef>
#include <string>

namespace ddp::rendezvous {

struct ServerLimits {
  // Each field at 0 (its default here) means: the DDPLAUNCH_STORE_* variable named below when
  // it is set, else the default beside it. A value set in code wins over the variable.

  // Connections open at once from one client IP address: one node's agent, its workers and
  // their wait and presence connections all count (DDPLAUNCH_STORE_MAX_CONNS_PER_PEER, 1024).
  size_t max_conns_per_peer = 0;
  // Bytes held for clients: keys + values + ON_CLOSE records + keys of parked waits; also the
  // budget of requests still arriving, all connections together (DDPLAUNCH_STORE_MAX_BYTES,
  // 1 GiB).
  size_t max_bytes = 0;
  // Keys in the store (DDPLAUNCH_STORE_MAX_KEYS, 1Mi).
  size_t max_keys = 0;
  // How long a connection may hold part of a request (or of the 2.x handshake) before it is
  // closed as a slow-loris; a connection that sent nothing, or whose wait is parked, is not
  // one (DDPLAUNCH_STORE_FRAME_TIMEOUT_MS, 30 s).
  std::chrono::milliseconds frame_timeout{0};
};

inline constexpr size_t kDefaultMaxConnsPerPeer = 1024;
inline constexpr size_t kDefaultMaxStoreBytes = size_t{1} << 30;
inline constexpr size_t kDefaultMaxStoreKeys = size_t{1} << 20;
inline constexpr std::chrono::milliseconds kDefaultFrameTimeout{30000};

// given with every 0 field filled from its variable or default. Throws ConfigError naming the
// variable and value when one is not a positive integer.
ServerLimits resolve_limits(const ServerLimits& given);

// "(limit: ddpstore --max-conns-per-peer / DDPLAUNCH_STORE_MAX_CONNS_PER_PEER)", for the
// messages of each limit.
std::string limit_conns_per_peer_text();
std::string limit_bytes_text();
std::string limit_keys_text();
std::string limit_frame_timeout_text();

}  // namespace ddp::rendezvous
