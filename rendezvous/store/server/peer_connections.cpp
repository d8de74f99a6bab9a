#include "rendezvous/store/server/peer_connections.hpp"

#include "common/log.hpp"
#include "rendezvous/store/server/server_limits.hpp"

namespace ddp::rendezvous {

std::string peer_address(const std::string& peer) {
  if (!peer.empty() && peer.front() == '[') {
    const auto close = peer.find(']');
    return close == std::string::npos ? peer : peer.substr(1, close - 1);
  }
  const auto colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

bool PeerConnections::admit(const std::string& peer) {
  const std::string address = peer_address(peer);
  Peer& p = peers_[address];
  if (p.open >= max_per_peer_) {
    if (p.refused++ == 0) {
      DDP_LOG_WARN("refusing connections from " + address + ": " + std::to_string(p.open) +
                   " connections from this address are open " + limit_conns_per_peer_text() +
                   "; one line per streak");
    }
    return false;
  }
  if (p.refused > 0) {
    DDP_LOG_INFO("accepting connections from " + address + " again after refusing " +
                 std::to_string(p.refused));
    p.refused = 0;
  }
  ++p.open;
  return true;
}

void PeerConnections::release(const std::string& peer) {
  auto it = peers_.find(peer_address(peer));
  if (it == peers_.end()) return;
  if (it->second.open > 0) --it->second.open;
  if (it->second.open == 0) {
    if (it->second.refused > 0) {
      DDP_LOG_INFO("connections from " + it->first + " all closed after refusing " +
                   std::to_string(it->second.refused));
    }
    peers_.erase(it);
  }
}

size_t PeerConnections::open_from(const std::string& peer) const {
  auto it = peers_.find(peer_address(peer));
  return it == peers_.end() ? 0 : it->second.open;
}

}  // namespace ddp::rendezvous
