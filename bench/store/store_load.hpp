#pragma once
// A closed-loop load generator for TCPStore-protocol servers: every connection runs
// [SET k + GET k] then [ADD counter] round trips back to back, one request in flight per
// connection, all connections on one thread, timing each round trip. Speaks either dialect
// (PyTorch 1.13's server knows only legacy). Two engines drive the same loop: io_uring (one
// system call per turn for every connection's sends and receives) and epoll (one recv and one
// send per round trip).
#include <cstdint>
#include <string>
#include <vector>

#include "rendezvous/store/wire_codec.hpp"

namespace ddp::bench {

enum class LoadIo : uint8_t { kIoUring, kEpoll };

struct LoadOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  int clients = 1;
  int requests_per_client = 1000;  // SET, GET and ADD each count as one request
  size_t value_bytes = 64;
  rendezvous::wire::Dialect dialect = rendezvous::wire::Dialect::kV2;
  LoadIo io = LoadIo::kIoUring;
  // Non-empty: every connection negotiates ddplaunch's dialect and proves this secret
  // (AUTH_CHALLENGE + AUTH_PROOF) before its first request, as TcpStore does. kV2 only.
  std::string secret;
};

struct LoadResult {
  uint64_t requests = 0;
  double seconds = 0;
  double cpu_seconds = 0;             // this process's user+system time while timed
  std::vector<double> round_trip_us;  // every round trip, unsorted
  // Per connection: from connect() to the reply of its first request (handshake included).
  std::vector<double> connect_us;
  [[nodiscard]] double requests_per_second() const { return requests / seconds; }
  // Percentile (0..100) of round-trip latency in microseconds.
  [[nodiscard]] double percentile_us(double p) const;
  // The same percentile of connect_us.
  [[nodiscard]] double connect_percentile_us(double p) const;
};

// Connects every client (retrying until 30 s), runs the load, returns the measurements.
// Throws StoreError on a connection failure or a reply that does not match the request, and
// when io_uring was asked for where this build or kernel has none.
LoadResult run_load(const LoadOptions& options);

}  // namespace ddp::bench
