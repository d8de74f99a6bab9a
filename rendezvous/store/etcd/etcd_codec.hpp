#pragma once
// Pure helpers of the etcd v3 HTTP/JSON gateway: keys and values travel as base64 in JSON,
// int64 fields as decimal strings (and are left out when zero), a prefix is a key range.
// No I/O, so every edge is unit-tested.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace ddp::rendezvous {

// Standard base64 with padding (RFC 4648), as the gateway's JSON carries bytes.
std::string base64_encode(const std::string& bytes);
// Inverse of base64_encode; ProtocolError on characters or lengths that are not base64.
std::string base64_decode(const std::string& text);

// The range_end that makes [prefix, range_end) every key starting with prefix: the prefix
// with its last byte below 0xff incremented and the rest dropped; "\0" (all keys) when prefix
// is empty or all 0xff.
std::string prefix_range_end(const std::string& prefix);

// An int64 field of a gateway reply: a decimal string, a number, or absent (= 0).
// ProtocolError when it is something else.
int64_t json_int(const nlohmann::json& object, const char* field);

// "host:port", "http://host:port" or "https://host:port"; a bare host:port speaks TLS when
// tls_default (TLS files were given). ConfigError on anything else (a missing or bad port, a
// path).
struct EtcdEndpoint {
  std::string host;
  uint16_t port = 0;
  bool tls = false;
  [[nodiscard]] std::string url() const;  // "http://host:port" or "https://host:port"
};
EtcdEndpoint parse_etcd_endpoint(const std::string& text, bool tls_default = false);

}  // namespace ddp::rendezvous
