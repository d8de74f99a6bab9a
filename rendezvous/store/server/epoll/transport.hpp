#pragma once
// One client connection of the epoll backend: a non-blocking socket in the loop's epoll set.
// Readable -> one recv into the loop's shared buffer, handed to the session; replies go out
// with send() at once and wait for EPOLLOUT only when the socket is full.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/store/server/byte_transport.hpp"
#include "rendezvous/store/server/epoll/event_loop.hpp"
#include "rendezvous/store/server/epoll/owned_fd.hpp"
#include "rendezvous/store/server/store_session.hpp"

namespace ddp::rendezvous {

class EpollTransport final : public EpollHandler, public ByteTransport {
 public:
  // Called once when the connection closes; the connection may be destroyed only after the
  // loop's current turn (later events of the turn may still name it).
  using OnClosed = std::function<void(EpollTransport*)>;

  // Takes ownership of fd (connected, non-blocking). read_buffer is the loop's, shared by
  // every connection (one thread).
  EpollTransport(int fd, EventLoop& loop, std::vector<char>& read_buffer, OnClosed on_closed);
  ~EpollTransport() override;
  EpollTransport(const EpollTransport&) = delete;
  EpollTransport& operator=(const EpollTransport&) = delete;

  // The session this connection carries; set once, before start().
  void attach(std::shared_ptr<StoreSession> session) { session_ = std::move(session); }
  [[nodiscard]] StoreSession& session() { return *session_; }
  // Registers with the loop; throws StoreError when it cannot.
  void start();

  void handle_events(uint32_t events) override;
  void write(std::string_view bytes) override { out_.append(bytes); }
  void flush() override;
  [[nodiscard]] size_t queued_bytes() const override { return out_.size() - out_sent_; }
  void set_reading(bool on) override;
  void enable_liveness() override;
  void close() override;

 private:
  void on_readable();
  // Epoll interest from the current state: read unless paused, write while replies wait.
  void update_interest();

  OwnedFd fd_;
  EventLoop& loop_;
  std::vector<char>& read_buffer_;
  OnClosed on_closed_;
  std::shared_ptr<StoreSession> session_;
  std::string out_;  // replies not yet sent: out_[out_sent_, end)
  size_t out_sent_ = 0;
  bool reading_ = true;
  bool want_writable_ = false;  // the socket was full: EPOLLOUT is in the interest
  bool closed_ = false;
};

}  // namespace ddp::rendezvous
