// Hosts as users write them: bracketed and bare IPv6 literals, "host:port" text, where a
// store listens for a given dial address, and which hosts name this machine.
#include "common/host_address.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <catch2/catch.hpp>
#include <cstring>

#include "common/error.hpp"

using namespace ddp;

TEST_CASE("normalize_host strips brackets and spells IPv6 canonically", "[ipv6]") {
  CHECK(normalize_host("[::1]") == "::1");
  CHECK(normalize_host("::1") == "::1");
  CHECK(normalize_host("0:0:0:0:0:0:0:1") == "::1");
  CHECK(normalize_host("[FD00:0::2]") == "fd00::2");
  CHECK(normalize_host("fe80::1%eth0") == "fe80::1%eth0");
  CHECK(normalize_host("127.0.0.1") == "127.0.0.1");
  CHECK(normalize_host("node01") == "node01");
  CHECK(normalize_host("") == "");
}

TEST_CASE("join_host_port brackets IPv6 literals only", "[ipv6]") {
  CHECK(join_host_port("::1", 29400) == "[::1]:29400");
  CHECK(join_host_port("[::1]", 29400) == "[::1]:29400");
  CHECK(join_host_port("fe80::1%eth0", 5) == "[fe80::1%eth0]:5");
  CHECK(join_host_port("127.0.0.1", 29400) == "127.0.0.1:29400");
  CHECK(join_host_port("gpu01", 29400) == "gpu01:29400");
}

TEST_CASE("IPv6 literals and loopback hosts are recognised in any spelling", "[ipv6]") {
  for (const char* v6 : {"::1", "[::1]", "fd00::2", "::", "fe80::1%eth0", "::ffff:10.0.0.1"}) {
    INFO(v6);
    CHECK(is_ipv6_literal(v6));
  }
  for (const char* other : {"127.0.0.1", "node1", "", "[node1]", "fd00::1:29400x"}) {
    INFO(other);
    CHECK_FALSE(is_ipv6_literal(other));
  }
  for (const char* loop : {"localhost", "127.0.0.1", "127.1.2.3", "::1", "[::1]", "0::1"}) {
    INFO(loop);
    CHECK(is_loopback_host(loop));
  }
  for (const char* other : {"10.0.0.1", "fd00::2", "::", "node1", "1270.0.0.1"}) {
    INFO(other);
    CHECK_FALSE(is_loopback_host(other));
  }
}

TEST_CASE("the store listens where clients dialling the address reach it", "[ipv6]") {
  // Loopback: exactly that address, so several local "nodes" can each have one.
  CHECK(listen_host_for("::1", true) == "::1");
  CHECK(listen_host_for("[::1]", true) == "::1");
  CHECK(listen_host_for("127.0.0.2", true) == "127.0.0.2");
  CHECK(listen_host_for("localhost", true) == "127.0.0.1");
  // Anything else: every interface (dual-stack where there is IPv6).
  CHECK(listen_host_for("10.0.0.1", true) == kAnyHost);
  CHECK(listen_host_for("fd00::5", true) == kAnyHost);
  CHECK(listen_host_for("node01", true) == kAnyHost);
  CHECK(listen_host_for("10.0.0.1", false) == kAnyHost);
  CHECK(listen_host_for("127.0.0.1", false) == "127.0.0.1");
  // An IPv6 address on a machine without IPv6: nothing could ever listen there.
  for (const char* v6 : {"::1", "[fd00::5]"}) {
    INFO(v6);
    CHECK_THROWS_AS(listen_host_for(v6, false), ddp::ConfigError);
    CHECK_THROWS_WITH(listen_host_for(v6, false),
                      Catch::Contains(normalize_host(v6)) && Catch::Contains("no IPv6"));
  }
}

TEST_CASE("is_local_address knows ::1 and this machine's IPv6 addresses", "[ipv6]") {
  CHECK(is_local_address("::1"));
  CHECK(is_local_address("[::1]"));
  CHECK(is_local_address("0:0:0::1"));
  CHECK_FALSE(is_local_address("2001:db8::1"));  // documentation prefix: never assigned
  CHECK_FALSE(is_local_address("192.0.2.1"));    // TEST-NET-1
  // Every IPv6 address of an interface, bracketed and in its long spelling.
  ifaddrs* addrs = nullptr;
  REQUIRE(::getifaddrs(&addrs) == 0);
  for (ifaddrs* a = addrs; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET6) continue;
    sockaddr_in6 in6{};
    std::memcpy(&in6, a->ifa_addr, sizeof(in6));
    if (IN6_IS_ADDR_LINKLOCAL(&in6.sin6_addr)) continue;  // needs a scope to be named
    char text[INET6_ADDRSTRLEN] = {};
    REQUIRE(::inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof(text)) != nullptr);
    INFO(text);
    CHECK(is_local_address(std::string("[") + text + "]"));
  }
  ::freeifaddrs(addrs);
}
