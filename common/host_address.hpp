#pragma once
// Hosts as users write them (names, IPv4, bare or bracketed IPv6 literals) and the address a
// store listens on so that clients dialling a given host reach it. docs/multinode.md, "IPv6".
#include <cstdint>
#include <string>

namespace ddp {

// The listen host meaning "every interface": one dual-stack IPv6 socket (IPv6 and IPv4
// clients) where the machine has IPv6, 0.0.0.0 otherwise. StoreServerOptions' default.
inline constexpr const char* kAnyHost = "";

// "[::1]" -> "::1", IPv6 literals in canonical form ("0:0::1" -> "::1"); other hosts as given.
std::string normalize_host(const std::string& host);
// True for a numeric IPv6 address, bracketed or not, with or without a "%scope".
bool is_ipv6_literal(const std::string& host);
// True for "localhost", 127.0.0.0/8 and ::1 (bracketed or not).
bool is_loopback_host(const std::string& host);
// "host:port" with an IPv6 literal bracketed ("[::1]:29400"), as torchrun and URLs write it.
std::string join_host_port(const std::string& host, uint16_t port);
// True when this machine can open IPv6 sockets (a kernel without IPv6 refuses AF_INET6).
bool ipv6_available();
// Where a store server listens so that clients dialling dial_host reach it: a loopback host
// itself ("localhost" -> 127.0.0.1, "[::1]" -> ::1), every other host kAnyHost. ConfigError
// naming dial_host when it is an IPv6 literal and the machine has no IPv6 (have_ipv6).
std::string listen_host_for(const std::string& dial_host, bool have_ipv6);

// The loopback address a single-node store listens on for clients that would dial host: host
// itself when it is a loopback address ("127.0.0.2", "::1"), ::1 for any other IPv6 literal,
// else 127.0.0.1 ("localhost", names, IPv4 addresses).
std::string loopback_for(const std::string& host);
// Where a multi-node store listens so that the other nodes, dialling dial_host, reach it and
// nothing else does: a loopback dial_host itself (every node on this machine); dial_host when
// it is an address of this machine; else local_addr (--local_addr, "" when not given) when it
// is one, or a name resolving to one; else dial_host's name resolved to an address of this
// machine other than loopback. kAnyHost when none of them is (a name that resolves here
// only to 127.0.1.1, an address behind NAT): why then says so, for a log line.
std::string store_listen_host(const std::string& dial_host, const std::string& local_addr,
                              std::string& why);

// True when host is a loopback name/address, this machine's host name, or one of its
// interface addresses (IPv6 bracketed or not, in any spelling).
bool is_local_address(const std::string& host);
// This machine's host name (gethostname), "localhost" when it has none.
std::string local_host_name();
// This machine's address on the route to host:port (a UDP socket connected there, so nothing
// is sent): what another node on that network dials to reach this one. "" when there is no
// route (or host does not resolve).
std::string local_address_toward(const std::string& host, uint16_t port);
// The host name as Python's socket.getfqdn() gives it (what torchrun's failure summary prints):
// the name's first address looked up in reverse, the first of its names and aliases that holds
// a '.', else its name; local_host_name() when either lookup fails.
std::string fully_qualified_host_name();

}  // namespace ddp
