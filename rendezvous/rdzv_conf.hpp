#pragma once
// --rdzv_conf "key=value,..." and --rdzv_endpoint "host:port", as torchrun spells them.
// Durations are seconds ("30", "2.5") or carry a unit ("500ms", "2s", "1m").
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/store/store.hpp"

namespace ddp::rendezvous {

struct RdzvConf {
  std::optional<Duration> join_timeout;
  std::optional<Duration> last_call_timeout;
  std::optional<Duration> close_timeout;
  std::optional<Duration> heartbeat_interval;  // also torch's keep_alive_interval
  std::optional<Duration> lease_timeout;       // or keep_alive_interval * keep_alive_max_attempt
  // How long the store host serves, after its own workers finished, for the others to.
  std::optional<Duration> exit_barrier_timeout;
  std::optional<bool> is_host;
  // The store moves to a member's standby when the node hosting it is lost (default on).
  std::optional<bool> store_succession;
  // The etcd backend (docs/etcd.md): torchrun's etcd keys, and etcd's user and password.
  std::optional<std::string> protocol;  // http or https
  std::optional<std::string> cacert;    // PEM files
  std::optional<std::string> cert;
  std::optional<std::string> key;
  std::optional<std::string> user;
  std::optional<std::string> password_file;  // mode 0600, like --secret_file
  // Keys torchrun accepts for other backends (read_timeout, store_type, ...): ignored, and
  // listed here so the agent can say so.
  std::vector<std::string> ignored;
};

// Parses "join_timeout=60,is_host=true,..."; ConfigError naming the item and what was
// expected for malformed items, bad durations and booleans, and unknown keys.
RdzvConf parse_rdzv_conf(const std::string& text);

// Parses a duration for key (seconds, or with an ms/s/m suffix); ConfigError naming both.
Duration parse_duration(const std::string& key, const std::string& value);

struct Endpoint {
  std::string host;
  uint16_t port = 0;
};

// "host:port", "host" (default_port), "[::1]:port", "[::1]" or "::1" (default_port); the
// host comes back bare ("::1"). ConfigError naming the text ("fd00::1:29400" needs brackets).
Endpoint parse_endpoint(const std::string& text, uint16_t default_port);

// "host:port" ("[v6]:port" for IPv6): what parse_endpoint reads back.
std::string format_endpoint(const Endpoint& endpoint);

}  // namespace ddp::rendezvous
