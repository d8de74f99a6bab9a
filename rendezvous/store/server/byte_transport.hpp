#pragma once
// How a StoreSession's bytes move: the part of a connection that differs between the
// server's I/O backends (epoll readiness + recv/send, or io_uring completions). The session
// never touches the socket; its backend calls StoreSession::received() with what arrived and
// implements this interface for what goes out.
#include <cstddef>
#include <string_view>
#include <utility>

namespace ddp::rendezvous {

// Empties a connection's input or reply buffer; one larger than 1 MiB is released instead,
// so one big value does not pin memory for the connection's lifetime.
template <class Buffer>
void clear_buffer(Buffer& buffer) {
  if (buffer.capacity() > size_t{1024} * 1024) {
    Buffer().swap(buffer);
  } else {
    buffer.clear();
  }
}

class ByteTransport {
 public:
  virtual ~ByteTransport() = default;
  // Queues reply bytes behind those already queued (never blocks, never sends yet).
  virtual void write(std::string_view bytes) = 0;
  // Starts sending what is queued: now, or as soon as the socket takes it. Errors come back
  // as StoreSession::write_failed(); a drained queue as StoreSession::drained().
  virtual void flush() = 0;
  // Reply bytes queued and not yet handed to the kernel.
  [[nodiscard]] virtual size_t queued_bytes() const = 0;
  // Stops (false) or resumes (true) reading: back-pressure on a client that does not read
  // its replies. Errors and end of stream are still reported while stopped.
  virtual void set_reading(bool on) = 0;
  // Turns on dead-peer detection (keepalive, TCP_USER_TIMEOUT: common/tcp_liveness.hpp) for
  // a connection that negotiated ddplaunch's own dialect. Off by default.
  virtual void enable_liveness() {}
  // Closes the socket. The session makes no further calls; the backend releases the
  // connection once no operation of its is in flight.
  virtual void close() = 0;
};

}  // namespace ddp::rendezvous
