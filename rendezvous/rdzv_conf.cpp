#include "rendezvous/rdzv_conf.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include "common/error.hpp"
#include "common/host_address.hpp"
#include "common/parse_int.hpp"

namespace ddp::rendezvous {
namespace {

// Keys torchrun defines for backends or versions this launcher does not use.
const std::set<std::string> kIgnoredKeys = {"timeout",   "read_timeout", "store_type",
                                            "use_libuv", "ssl_cert",     "ssl_key"};

bool parse_bool(const std::string& key, std::string value) {
  std::transform(value.begin(), value.end(), value.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (value == "1" || value == "true" || value == "yes" || value == "on") return true;
  if (value == "0" || value == "false" || value == "no" || value == "off") return false;
  throw ConfigError("--rdzv_conf " + key + "=" + value +
                    ": expected a boolean (true/false, 1/0, yes/no)");
}

}  // namespace

Duration parse_duration(const std::string& key, const std::string& value) {
  double number = 0;
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, number);
  const std::string unit(ptr, end);
  double scale = 0;
  if (unit.empty() || unit == "s") scale = 1000;
  if (unit == "ms") scale = 1;
  if (unit == "m") scale = 60000;
  if (ec != std::errc() || ptr == value.data() || scale == 0 || !std::isfinite(number) ||
      number < 0 || number * scale > 1e12) {
    throw ConfigError("--rdzv_conf " + key + "=" + value +
                      ": expected a non-negative duration in seconds (30, 2.5) or with a unit "
                      "(500ms, 2s, 1m)");
  }
  return Duration(static_cast<int64_t>(std::llround(number * scale)));
}

RdzvConf parse_rdzv_conf(const std::string& text) {
  RdzvConf conf;
  std::optional<Duration> keep_alive_interval;
  std::optional<int> keep_alive_max_attempt;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw ConfigError("--rdzv_conf item '" + item + "' in '" + text + "': expected key=value");
    }
    const std::string key = item.substr(0, eq);
    const std::string value = item.substr(eq + 1);
    if (key == "join_timeout") {
      conf.join_timeout = parse_duration(key, value);
    } else if (key == "last_call_timeout") {
      conf.last_call_timeout = parse_duration(key, value);
    } else if (key == "close_timeout") {
      conf.close_timeout = parse_duration(key, value);
    } else if (key == "heartbeat_interval") {
      conf.heartbeat_interval = parse_duration(key, value);
    } else if (key == "lease_timeout") {
      conf.lease_timeout = parse_duration(key, value);
    } else if (key == "exit_barrier_timeout") {
      conf.exit_barrier_timeout = parse_duration(key, value);
    } else if (key == "keep_alive_interval") {
      keep_alive_interval = parse_duration(key, value);
    } else if (key == "keep_alive_max_attempt") {
      keep_alive_max_attempt = static_cast<int>(parse_int(
          "--rdzv_conf keep_alive_max_attempt", value, 1, std::numeric_limits<int>::max()));
    } else if (key == "is_host") {
      conf.is_host = parse_bool(key, value);
    } else if (key == "store_succession") {
      conf.store_succession = parse_bool(key, value);
    } else if (key == "protocol") {
      if (value != "http" && value != "https") {
        throw ConfigError("--rdzv_conf protocol=" + value + ": expected http or https");
      }
      conf.protocol = value;
    } else if (key == "cacert" || key == "cert" || key == "key" || key == "user" ||
               key == "password_file") {
      if (value.empty()) throw ConfigError("--rdzv_conf " + key + "=: expected a value");
      auto& field = key == "cacert" ? conf.cacert
                    : key == "cert" ? conf.cert
                    : key == "key"  ? conf.key
                    : key == "user" ? conf.user
                                    : conf.password_file;
      field = value;
    } else if (kIgnoredKeys.count(key) != 0) {
      conf.ignored.push_back(key);
    } else {
      throw ConfigError("--rdzv_conf key '" + key +
                        "' is unknown; expected join_timeout, last_call_timeout, "
                        "close_timeout, is_host, store_succession, keep_alive_interval, "
                        "keep_alive_max_attempt, "
                        "heartbeat_interval, lease_timeout, exit_barrier_timeout, or for etcd "
                        "protocol, cacert, cert, key, user, password_file");
    }
  }
  // torchrun's keep-alive pair maps onto the heartbeat ring unless given directly.
  if (keep_alive_interval && !conf.heartbeat_interval) {
    conf.heartbeat_interval = keep_alive_interval;
  }
  if (keep_alive_max_attempt && !conf.lease_timeout) {
    const Duration interval = conf.heartbeat_interval.value_or(std::chrono::seconds(1));
    conf.lease_timeout = interval * *keep_alive_max_attempt;
  }
  return conf;
}

Endpoint parse_endpoint(const std::string& text, uint16_t default_port) {
  auto bad = [&](const std::string& why = "") {
    return ConfigError("--rdzv_endpoint '" + text + "': " + (why.empty() ? "" : why + "; ") +
                       "expected host:port, host, [ipv6]:port or ipv6, with a port in 1-65535");
  };
  Endpoint ep;
  std::optional<std::string> port_text;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos) throw bad("'[' without ']'");
    ep.host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') throw bad("expected ':port' after ']'");
      port_text = text.substr(close + 2);
    }
  } else if (std::count(text.begin(), text.end(), ':') > 1) {
    // A bare IPv6 address is all host: "::1" is not host ":" port 1.
    if (!is_ipv6_literal(text)) {
      throw bad("an IPv6 address with a port is written in brackets, e.g. [fd00::1]:29400");
    }
    ep.host = text;
  } else {
    const auto colon = text.rfind(':');
    ep.host = text.substr(0, colon);
    if (colon != std::string::npos) port_text = text.substr(colon + 1);
  }
  if (ep.host.empty()) throw bad("no host");
  ep.host = normalize_host(ep.host);
  if (!port_text) {
    ep.port = default_port;
    return ep;
  }
  const auto port = try_parse_int(*port_text, 1, 65535);
  if (!port) throw bad();
  ep.port = static_cast<uint16_t>(*port);
  return ep;
}

std::string format_endpoint(const Endpoint& endpoint) {
  const std::string host =
      is_ipv6_literal(endpoint.host) ? "[" + endpoint.host + "]" : endpoint.host;
  return host + ":" + std::to_string(endpoint.port);
}

}  // namespace ddp::rendezvous
