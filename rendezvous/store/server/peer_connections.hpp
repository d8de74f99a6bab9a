#pragma once
// Connections open per client IP address, so one address (a scanner, a runaway script) cannot
// take every descriptor of the server: past the limit a new connection from that address is
// closed at once. One log line per streak of refusals, one when that address is served again.
#include <cstddef>
#include <string>
#include <unordered_map>

namespace ddp::rendezvous {

class PeerConnections {
 public:
  explicit PeerConnections(size_t max_per_peer) : max_per_peer_(max_per_peer) {}

  // A connection from peer ("10.0.0.5:41234", "[fd00::5]:41234") was accepted: true to serve
  // it (counted until release()), false when its address already holds the maximum.
  bool admit(const std::string& peer);
  // A connection admit() accepted has closed.
  void release(const std::string& peer);
  // The server stops: every connection is gone.
  void clear() { peers_.clear(); }
  // Connections counted for peer's address (tests).
  [[nodiscard]] size_t open_from(const std::string& peer) const;

 private:
  struct Peer {
    size_t open = 0;
    size_t refused = 0;  // in the current streak
  };

  size_t max_per_peer_;
  std::unordered_map<std::string, Peer> peers_;  // by address, without the port
};

// "10.0.0.5" of "10.0.0.5:41234", "fd00::5" of "[fd00::5]:41234".
std::string peer_address(const std::string& peer);

}  // namespace ddp::rendezvous
