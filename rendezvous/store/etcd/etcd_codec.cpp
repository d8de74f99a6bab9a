#include "rendezvous/store/etcd/etcd_codec.hpp"

#include <array>

#include "common/error.hpp"
#include "common/host_address.hpp"
#include "common/parse_int.hpp"

namespace ddp::rendezvous {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int sextet(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

std::string base64_encode(const std::string& bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t n = (static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << 16) |
                       (static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 1])) << 8) |
                       static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 2]));
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += kAlphabet[n & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t n = static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << 16;
    if (rest == 2) n |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 1])) << 8;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += rest == 2 ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string base64_decode(const std::string& text) {
  if (text.size() % 4 != 0) {
    throw ProtocolError("etcd: base64 text of length " + std::to_string(text.size()) +
                        " (not a multiple of 4)");
  }
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    // Only the last group may end in padding: "x===" is never valid, "xx==" and "xxx=" are.
    int pad = 0;
    if (i + 4 == text.size()) {
      if (text[i + 3] == '=') ++pad;
      if (pad == 1 && text[i + 2] == '=') ++pad;
    }
    std::array<uint32_t, 4> v{};
    for (size_t j = 0; j < 4 - static_cast<size_t>(pad); ++j) {
      const int s = sextet(text[i + j]);
      if (s < 0) {
        throw ProtocolError("etcd: bad base64 character at offset " + std::to_string(i + j));
      }
      v[j] = static_cast<uint32_t>(s);
    }
    const uint32_t n = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out += static_cast<char>((n >> 16) & 0xff);
    if (pad < 2) out += static_cast<char>((n >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(n & 0xff);
  }
  return out;
}

std::string prefix_range_end(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    auto& last = end.back();
    if (static_cast<uint8_t>(last) < 0xff) {
      last = static_cast<char>(static_cast<uint8_t>(last) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

int64_t json_int(const nlohmann::json& object, const char* field) {
  const auto it = object.find(field);
  if (it == object.end() || it->is_null()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    if (auto v = try_parse_int(it->get<std::string>())) return *v;
  }
  throw ProtocolError(std::string("etcd: field '") + field + "' is not an integer: " + it->dump());
}

std::string EtcdEndpoint::url() const {
  return (tls ? "https://" : "http://") + join_host_port(host, port);
}

EtcdEndpoint parse_etcd_endpoint(const std::string& text, bool tls_default) {
  std::string rest = text;
  bool tls = tls_default;
  if (rest.rfind("https://", 0) == 0) {
    tls = true;
    rest = rest.substr(8);
  } else if (rest.rfind("http://", 0) == 0) {
    tls = false;
    rest = rest.substr(7);
  }
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  const auto colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0 || rest.find('/') != std::string::npos) {
    throw ConfigError("etcd endpoint '" + text +
                      "': expected host:port, http://host:port or https://host:port");
  }
  EtcdEndpoint endpoint;
  endpoint.tls = tls;
  endpoint.host = normalize_host(rest.substr(0, colon));
  endpoint.port = static_cast<uint16_t>(
      parse_int("etcd endpoint '" + text + "' port", rest.substr(colon + 1), 1, 65535));
  return endpoint;
}

}  // namespace ddp::rendezvous
