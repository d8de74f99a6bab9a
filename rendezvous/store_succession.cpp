#include "rendezvous/store_succession.hpp"

#include "common/error.hpp"

namespace ddp::rendezvous {

std::string format_standbys(const std::vector<Endpoint>& standbys) {
  std::string text;
  for (const auto& endpoint : standbys) {
    if (!endpoint.host.empty()) text += format_endpoint(endpoint);
    text += '\n';
  }
  return text;
}

std::vector<Endpoint> parse_standbys(const std::string& text) {
  std::vector<Endpoint> standbys;
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t end = text.find('\n', begin);
    if (end == std::string::npos) {
      throw ProtocolError("rendezvous standby list '" + text +
                          "' does not parse; expected one 'host:port' (or nothing) per line");
    }
    const std::string line = text.substr(begin, end - begin);
    try {
      standbys.push_back(line.empty() ? Endpoint{} : parse_endpoint(line, 0));
    } catch (const ConfigError& e) {
      throw ProtocolError("rendezvous standby list: line '" + line + "' does not parse (" +
                          e.what() + ")");
    }
    begin = end + 1;
  }
  return standbys;
}

std::vector<Endpoint> successors(const Succession& succession) {
  std::vector<Endpoint> out;
  for (const auto& endpoint : succession.standbys) {
    if (endpoint.host.empty()) continue;
    if (endpoint.host == succession.store.host && endpoint.port == succession.store.port) continue;
    out.push_back(endpoint);
  }
  return out;
}

bool may_take_over(int live_supporters, int electorate, bool host_dead,
                   std::chrono::steady_clock::duration since_lost,
                   std::chrono::steady_clock::duration margin) {
  if (live_supporters * 2 <= electorate) return false;
  return host_dead || since_lost >= margin;
}

bool quorum_lost(int silent, int members) {
  return silent * 2 > members;
}

}  // namespace ddp::rendezvous
