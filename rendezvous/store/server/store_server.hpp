#pragma once
// The TCP store server: one event loop (its own thread) serving thousands of connections in
// both PyTorch TCPStore dialects. Waiters are woken by whatever creates their keys; a bad
// frame closes only that connection. The loop is io_uring where the kernel allows it, epoll
// otherwise (docs/store.md, "The server loop").
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "rendezvous/store/server/server_limits.hpp"

namespace ddp::rendezvous {

// Which I/O backend serves the connections.
enum class StoreIo : uint8_t {
  kAuto,     // io_uring where available, else epoll; DDPLAUNCH_STORE_IO may choose instead
  kEpoll,    // epoll (any Linux)
  kIoUring,  // io_uring (Linux 6.1+); the constructor fails where it is unavailable
};

// "auto", "epoll" or "io_uring" -> StoreIo; nullopt for anything else.
std::optional<StoreIo> parse_store_io(const std::string& text);

struct StoreServerOptions {
  // Address to bind: kAnyHost ("", every interface: dual-stack IPv6 and IPv4 where the
  // machine has IPv6, else 0.0.0.0), "::" (dual-stack), 0.0.0.0 (IPv4 only), an address
  // ("127.0.0.1", "::1" or "[::1]") or a name (Listener).
  std::string host;
  uint16_t port = 0;  // 0: the kernel picks a free port (see StoreServer::port())
  size_t max_key_bytes = size_t{64} * 1024;
  size_t max_value_bytes = size_t{64} * 1024 * 1024;
  size_t max_keys_per_request = size_t{128} * 1024;
  StoreIo io = StoreIo::kAuto;
  // io_uring only: provided receive buffers of 2 KiB (a power of two up to 32768, the
  // kernel's limit; 2 MiB by default,
  // touched only as used). A loop turn takes at most this many arrivals; the rest wait a turn.
  unsigned io_uring_buffers = 1024;
  // Connections per client address, bytes and keys held, the slow-loris timeout: 0 fields
  // come from DDPLAUNCH_STORE_* or the defaults (server_limits.hpp).
  ServerLimits limits{};
  // The job secret (docs/security.md): non-empty -> native clients must prove it and every
  // other connection is confined to the worker namespace (set_worker_namespace()).
  std::string secret{};
};

class StoreServer {
 public:
  // Binds and listens in the constructor (throws BindError, a StoreError, naming host:port on
  // failure), so port() is valid and connectable as soon as it returns; serves on a
  // background thread.
  // Throws ConfigError for a bad DDPLAUNCH_STORE_IO or DDPLAUNCH_TCP_* (tcp_liveness.hpp), and
  // StoreError when io_uring was asked for explicitly and is unavailable.
  explicit StoreServer(StoreServerOptions options);
  ~StoreServer();  // stop()
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  // The bound port (the real one when options.port was 0).
  [[nodiscard]] uint16_t port() const;
  [[nodiscard]] const std::string& host() const;
  // Where it listens, for messages: "[::1]:29500", "[::]:29500 (IPv6 and IPv4)" (Listener).
  [[nodiscard]] const std::string& address() const;
  // The backend serving: "io_uring", "epoll", or "epoll (io_uring unavailable: <why>)" when
  // kAuto fell back.
  [[nodiscard]] const std::string& io_backend() const;
  // Closes the listener and every connection, joins the thread. Idempotent.
  void stop();
  // Unauthenticated connections may use keys under prefix from now on ("/worker/attempt_3/");
  // only meaningful with a secret. Thread-safe.
  void set_worker_namespace(const std::string& prefix);
  [[nodiscard]] bool requires_auth() const;
  // Connections currently open (for tests and benchmarks).
  [[nodiscard]] size_t num_connections() const;
  // The limits in force (every field resolved).
  [[nodiscard]] const ServerLimits& limits() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::rendezvous
