#pragma once
// One client connection of the store server: reads bytes when the poller says the socket is
// readable, lets the pure codec cut them into requests, hands those to ServerState, and
// writes the replies. Lives on the server's loop thread.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/connection_poller.hpp"
#include "rendezvous/server_state.hpp"
#include "rendezvous/wire_codec.hpp"

namespace ddp::rendezvous {

// What every session of one server shares: the limits and the name its log lines start with.
struct SessionConfig {
  wire::Limits limits;
  std::string log_name = "ddpstore";
};

class StoreSession final : public Connection,
                           public PollTarget,
                           public std::enable_shared_from_this<StoreSession> {
 public:
  // Called once when the connection closes; the session may be destroyed only after the
  // poller's current batch (ConnectionPoller's after_batch).
  using OnClosed = std::function<void(StoreSession*)>;

  // Takes ownership of fd: a connected, non-blocking TCP socket from `peer`. read_buffer is
  // the loop's read buffer, shared by every session of the server (one thread): a
  // connection keeps bytes of its own only while a frame is incomplete.
  StoreSession(int fd, std::string peer, ConnectionPoller& poller, ServerState& state,
               const SessionConfig& config, std::vector<char>& read_buffer, OnClosed on_closed);
  ~StoreSession() override;
  StoreSession(const StoreSession&) = delete;
  StoreSession& operator=(const StoreSession&) = delete;

  // Registers with the poller; throws StoreError when it cannot.
  void start();
  // Closes the socket without a log line (server shutdown).
  void stop();

  void on_ready(uint32_t events) override;
  void send(std::string_view bytes) override;
  [[nodiscard]] const std::string& peer() const override { return peer_; }

 private:
  void on_readable();
  // Parses and executes every complete request in data; returns the bytes used (the rest is
  // an incomplete frame). Check closed_ afterwards.
  size_t process(std::string_view data);
  // Sends queued replies until done or the socket is full (then waits for EPOLLOUT).
  void flush();
  // Epoll interest from the current state: read unless paused, write while replies wait.
  void update_interest();
  [[nodiscard]] size_t queued_bytes() const { return out_.size() - out_sent_; }
  // Closes the connection; reason non-empty -> exactly one log line naming the peer.
  void close(const std::string& reason);

  int fd_;
  std::string peer_;
  ConnectionPoller& poller_;
  ServerState& state_;
  const SessionConfig& config_;
  std::vector<char>& read_buffer_;
  OnClosed on_closed_;
  wire::Dialect dialect_ = wire::Dialect::kUnknown;

  std::vector<char> in_;  // bytes of an incomplete frame [in_begin_, in_end_)
  size_t in_begin_ = 0;
  size_t in_end_ = 0;
  size_t needed_ = 0;  // the codec's hint: don't parse again before this many bytes
  std::string out_;    // replies not yet sent: out_[out_sent_, end)
  size_t out_sent_ = 0;
  bool batching_ = false;       // inside process(): replies wait for one send at its end
  bool read_paused_ = false;    // too many replies queued: not reading until they drain
  bool want_writable_ = false;  // the socket was full: EPOLLOUT is in the interest
  bool closed_ = false;
};

}  // namespace ddp::rendezvous
