#include "common/host_address.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "common/error.hpp"

namespace ddp {
namespace {

std::string strip_brackets(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

// The address part of "fe80::1%eth0" parsed; false when it is not an IPv6 literal.
bool parse_ipv6(const std::string& bare, in6_addr& out, std::string& scope) {
  const auto percent = bare.find('%');
  const std::string address = bare.substr(0, percent);
  scope = percent == std::string::npos ? "" : bare.substr(percent);
  return ::inet_pton(AF_INET6, address.c_str(), &out) == 1;
}

}  // namespace

std::string normalize_host(const std::string& host) {
  std::string bare = strip_brackets(host);
  in6_addr address{};
  std::string scope;
  if (!parse_ipv6(bare, address, scope)) return bare;
  char text[INET6_ADDRSTRLEN] = {};
  if (::inet_ntop(AF_INET6, &address, text, sizeof(text)) == nullptr) return bare;
  return text + scope;
}

bool is_ipv6_literal(const std::string& host) {
  in6_addr address{};
  std::string scope;
  return parse_ipv6(strip_brackets(host), address, scope);
}

bool is_loopback_host(const std::string& host) {
  const std::string bare = normalize_host(host);
  if (bare == "localhost" || bare == "::1") return true;
  in_addr v4{};
  return ::inet_pton(AF_INET, bare.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

std::string join_host_port(const std::string& host, uint16_t port) {
  const std::string bare = strip_brackets(host);
  const std::string port_text = std::to_string(port);
  return is_ipv6_literal(bare) ? "[" + bare + "]:" + port_text : bare + ":" + port_text;
}

bool ipv6_available() {
  static const bool kAvailable = [] {
    const int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    ::close(fd);
    return true;
  }();
  return kAvailable;
}

std::string listen_host_for(const std::string& dial_host, bool have_ipv6) {
  std::string host = normalize_host(dial_host);
  if (is_ipv6_literal(host) && !have_ipv6) {
    throw ConfigError("the store address " + host +
                      " is IPv6, but this machine has no IPv6 (it refuses IPv6 sockets): nothing "
                      "can listen where clients would dial; use an IPv4 address or a host name");
  }
  if (host == "localhost") return "127.0.0.1";
  if (is_loopback_host(host)) return host;
  return kAnyHost;
}

bool is_local_address(const std::string& given) {
  const std::string host = normalize_host(given);
  if (is_loopback_host(host)) return true;
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) == 0 && host == name) return true;
  // Compared as addresses, not text, so any spelling of an IPv6 address matches.
  in_addr v4{};
  in6_addr v6{};
  const std::string address = host.substr(0, host.find('%'));
  const bool is_v4 = ::inet_pton(AF_INET, address.c_str(), &v4) == 1;
  const bool is_v6 = !is_v4 && ::inet_pton(AF_INET6, address.c_str(), &v6) == 1;
  if (!is_v4 && !is_v6) return false;
  ifaddrs* addrs = nullptr;
  if (::getifaddrs(&addrs) != 0) return false;
  bool found = false;
  for (ifaddrs* a = addrs; a != nullptr && !found; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    if (is_v4 && a->ifa_addr->sa_family == AF_INET) {
      sockaddr_in in{};
      std::memcpy(&in, a->ifa_addr, sizeof(in));
      found = in.sin_addr.s_addr == v4.s_addr;
    } else if (is_v6 && a->ifa_addr->sa_family == AF_INET6) {
      sockaddr_in6 in6{};
      std::memcpy(&in6, a->ifa_addr, sizeof(in6));
      found = std::memcmp(&in6.sin6_addr, &v6, sizeof(v6)) == 0;
    }
  }
  ::freeifaddrs(addrs);
  return found;
}

std::string loopback_for(const std::string& host) {
  std::string bare = normalize_host(host);
  if (bare == "localhost") return "127.0.0.1";
  if (is_loopback_host(bare)) return bare;
  return is_ipv6_literal(bare) ? "::1" : "127.0.0.1";
}

namespace {

// The first address name resolves to that is an interface address of this machine other
// than loopback; "" when there is none.
std::string resolve_local(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(name.c_str(), nullptr, &hints, &found) != 0) return "";
  std::string chosen;
  for (addrinfo* a = found; a != nullptr && chosen.empty(); a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET) {
      sockaddr_in in{};
      std::memcpy(&in, a->ai_addr, sizeof(in));
      if (::inet_ntop(AF_INET, &in.sin_addr, text, sizeof(text)) == nullptr) continue;
    } else if (a->ai_family == AF_INET6) {
      sockaddr_in6 in6{};
      std::memcpy(&in6, a->ai_addr, sizeof(in6));
      if (::inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof(text)) == nullptr) continue;
    } else {
      continue;
    }
    if (!is_loopback_host(text) && is_local_address(text)) chosen = normalize_host(text);
  }
  ::freeaddrinfo(found);
  return chosen;
}

bool is_ip_literal(const std::string& host) {
  in_addr v4{};
  return is_ipv6_literal(host) || ::inet_pton(AF_INET, host.c_str(), &v4) == 1;
}

}  // namespace

std::string store_listen_host(const std::string& dial_host, const std::string& local_addr,
                              std::string& why) {
  std::string dial = normalize_host(dial_host);
  std::string local = normalize_host(local_addr);
  why.clear();
  if (is_loopback_host(dial)) return loopback_for(dial);
  if (is_ip_literal(dial) && is_local_address(dial)) return dial;
  if (!local.empty()) {
    if (is_ip_literal(local) && is_local_address(local)) return local;
    if (!is_ip_literal(local)) {
      if (auto resolved = resolve_local(local); !resolved.empty()) return resolved;
    }
  }
  if (!is_ip_literal(dial)) {
    if (auto resolved = resolve_local(dial); !resolved.empty()) return resolved;
  }
  why = dial + (local.empty() ? "" : " (and --local_addr " + local + ")") +
        " is not an address of this machine's interfaces (behind NAT, or a name that resolves "
        "here only to loopback)";
  return kAnyHost;
}

std::string local_host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

std::string local_address_toward(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (::getaddrinfo(normalize_host(host).c_str(), service.c_str(), &hints, &res) != 0) return "";
  std::string found;
  for (addrinfo* ai = res; ai != nullptr && found.empty(); ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    // NOLINTNEXTLINE: the sockets API takes sockaddr*.
    auto* raw = reinterpret_cast<sockaddr*>(&local);
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::getsockname(fd, raw, &length) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* addr =
          local.ss_family == AF_INET6
              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
              : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
      if (::inet_ntop(local.ss_family, addr, text, sizeof(text)) != nullptr) found = text;
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return found;
}

std::string fully_qualified_host_name() {
  std::string name = local_host_name();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  addrinfo* found = nullptr;
  if (::getaddrinfo(name.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return name;
  // The first address, as CPython's gethostbyaddr() takes it.
  const int family = found->ai_family;
  in6_addr address{};
  socklen_t size = 0;
  if (family == AF_INET) {
    size = sizeof(in_addr);
    std::memcpy(&address, &reinterpret_cast<const sockaddr_in*>(found->ai_addr)->sin_addr, size);
  } else if (family == AF_INET6) {
    size = sizeof(in6_addr);
    std::memcpy(&address, &reinterpret_cast<const sockaddr_in6*>(found->ai_addr)->sin6_addr, size);
  }
  ::freeaddrinfo(found);
  if (size == 0) return name;
  hostent entry{};
  hostent* result = nullptr;
  int lookup_error = 0;
  std::vector<char> buffer(16384);
  while (::gethostbyaddr_r(&address, size, family, &entry, buffer.data(), buffer.size(), &result,
                           &lookup_error) == ERANGE) {
    buffer.resize(buffer.size() * 2);
  }
  if (result == nullptr || result->h_name == nullptr) return name;
  if (std::strchr(result->h_name, '.') != nullptr) return result->h_name;
  for (char** alias = result->h_aliases; alias != nullptr && *alias != nullptr; ++alias) {
    if (std::strchr(*alias, '.') != nullptr) return *alias;
  }
  return result->h_name;
}

}  // namespace ddp
