#pragma once
// How long a silent peer is only silence (docs/multinode.md, "Silence or death"). A death (a
// connection closed or reset, a refused reconnect, a child's exit) is told at once; silence (no
// packets: a cut link, a switch failover, a paused VM) cannot be told from a blip until some time
// has passed, so every timer that notices silence follows this one value: TCP_USER_TIMEOUT and
// keepalive on store connections (tcp_liveness.hpp), the rendezvous lease, and the store
// client's wait for a cancelled WAIT. One option (--peer_tolerance, DDPLAUNCH_PEER_TOLERANCE)
// sets it for the agent and its workers.
#include <chrono>
#include <string>

namespace ddp {

// torchrun's own tolerance: its c10d heartbeats miss for about 15 s before a node is lost.
inline constexpr std::chrono::milliseconds kDefaultPeerTolerance{15000};
// Below this, an ordinary scheduling hiccup or one lost SYN would already count as a loss.
inline constexpr std::chrono::milliseconds kMinPeerTolerance{1000};

// Parses "15", "2.5", "500ms", "2s", "1m" into a tolerance of at least kMinPeerTolerance (at
// most a day). ConfigError naming `what` (the option or variable), the value and the range.
std::chrono::milliseconds parse_peer_tolerance(const std::string& what, const std::string& text);

// DDPLAUNCH_PEER_TOLERANCE when set and not empty, else kDefaultPeerTolerance. ConfigError
// naming the variable and its value when it is bad.
std::chrono::milliseconds peer_tolerance_from_env();

// "15", "2.5": seconds as DDPLAUNCH_PEER_TOLERANCE takes them (parse_peer_tolerance reads it).
std::string tolerance_seconds(std::chrono::milliseconds tolerance);

// "15 s", "2.5 s": for messages.
std::string tolerance_text(std::chrono::milliseconds tolerance);

}  // namespace ddp
