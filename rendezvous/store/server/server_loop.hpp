#pragma once
// A store server's I/O backend: the event loop that accepts connections, moves their bytes
// and runs one StoreSession per connection. Two implementations: EpollLoop (a plain epoll
// loop: readiness, recv and send) and UringLoop (io_uring completions). StoreServer picks
// one and runs it on its thread; nothing else differs between them.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "rendezvous/store/server/peer_connections.hpp"
#include "rendezvous/store/server/server_state.hpp"
#include "rendezvous/store/server/store_session.hpp"

namespace ddp::rendezvous {

// What a loop shares with its StoreServer (which owns all of it and outlives the loop).
struct LoopContext {
  // A listening, non-blocking socket (epoll's accept_all() drains the queue until EAGAIN;
  // io_uring does not mind). The loop never closes it.
  int listen_fd = -1;
  uint16_t port = 0;
  ServerState* state = nullptr;
  const SessionConfig* sessions = nullptr;  // limits of every session
  std::atomic<size_t>* num_connections = nullptr;
  unsigned io_uring_buffers = 1024;  // StoreServerOptions::io_uring_buffers
  // Connections per client address: each accepted one is admitted (or closed at once) and
  // released when it closes. The slow-loris clock is sessions->frames (swept every period()).
  PeerConnections* peers = nullptr;
};

class ServerLoop {
 public:
  virtual ~ServerLoop() = default;
  // Serves until stop(); runs on the server's thread (the thread that created the loop).
  // Returns once every connection is closed and nothing of the loop's is in flight.
  virtual void run() = 0;
  // From any thread: run() closes the connections without a log line and returns.
  virtual void stop() = 0;
  // "epoll" or "io_uring", for log lines and tests.
  [[nodiscard]] virtual const char* name() const = 0;
};

}  // namespace ddp::rendezvous
