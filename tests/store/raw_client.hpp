#pragma once
// Test helpers for the store server: a raw byte-level connection, request builders, and a
// TcpStore factory with short deadlines.
#include <chrono>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/socket_io.hpp"
#include "rendezvous/store/server/store_server.hpp"
#include "rendezvous/store/tcp_store.hpp"
#include "rendezvous/store/wire_codec.hpp"

namespace ddp::test {

using namespace std::chrono_literals;
namespace wire = ddp::rendezvous::wire;
using ddp::Deadline;
using ddp::SocketConn;
using ddp::rendezvous::Duration;
using ddp::rendezvous::StoreServerOptions;
using ddp::rendezvous::TcpStore;
using ddp::rendezvous::TcpStoreOptions;

inline StoreServerOptions loopback() {
  StoreServerOptions o;
  o.host = "127.0.0.1";
  return o;
}

// A raw connection that speaks bytes, for checking the wire format exactly.
struct Raw {
  explicit Raw(uint16_t port, bool v2 = true) : conn(SocketConn::connect("127.0.0.1", port, 5s)) {
    if (v2) send(std::string("\x00\xCE\xF7\x85\x3C", 5));
  }
  void send(const std::string& bytes) { conn.send_all(bytes, Deadline::after(5s)); }
  void send(const wire::Request& r, wire::Dialect d = wire::Dialect::kV2) {
    send(wire::encode_request(r, d));
  }
  std::string recv(size_t n) { return conn.recv_exact(n, Deadline::after(5s)); }
  std::string recv_string() { return conn.recv_string(Deadline::after(5s)); }
  uint8_t recv_u8() { return static_cast<uint8_t>(recv(1)[0]); }
  int64_t recv_i64() { return static_cast<int64_t>(wire::get_u64(recv(8).data())); }
  // True when nothing arrives within a short while (the reply is parked).
  bool silent() {
    try {
      conn.recv_exact(1, Deadline::after(100ms));
      return false;
    } catch (const ddp::SocketTimeout&) {
      return true;
    }
  }
  // True when the server closed this connection.
  bool closed_by_server() {
    try {
      conn.recv_exact(1, Deadline::after(5s));
      return false;
    } catch (const ddp::SocketTimeout&) {
      return false;
    } catch (const ddp::SocketError&) {
      return true;
    }
  }
  SocketConn conn;
};

inline wire::Request req(wire::Command c, std::vector<std::string> keys = {},
                         std::vector<std::string> values = {}) {
  wire::Request r;
  r.command = c;
  r.keys = std::move(keys);
  r.values = std::move(values);
  return r;
}

inline TcpStore client(uint16_t port, Duration timeout = 5s) {
  TcpStoreOptions o;
  o.port = port;
  o.timeout = timeout;
  o.connect_timeout = 5s;
  return TcpStore(o);
}

}  // namespace ddp::test
