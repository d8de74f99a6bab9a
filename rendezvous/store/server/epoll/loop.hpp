#pragma once
// The epoll backend: one plain epoll loop (EventLoop) on the server's thread. The listener,
// every client socket, the accept-retry timer (a timerfd) and the stop() wake-up (an
// eventfd) are descriptors of the same level-triggered epoll set, each with its handler.
// Works on every Linux; StoreServer uses it where io_uring is unavailable or
// DDPLAUNCH_STORE_IO=epoll.
#include <memory>
#include <unordered_map>
#include <vector>

#include "rendezvous/store/server/epoll/event_loop.hpp"
#include "rendezvous/store/server/epoll/transport.hpp"
#include "rendezvous/store/server/listener.hpp"
#include "rendezvous/store/server/server_loop.hpp"

namespace ddp::rendezvous {

class EpollLoop final : public ServerLoop, private EpollHandler {
 public:
  // Throws StoreError when the epoll set, its eventfd or timerfd cannot be created.
  explicit EpollLoop(const LoopContext& context);
  ~EpollLoop() override;
  EpollLoop(const EpollLoop&) = delete;
  EpollLoop& operator=(const EpollLoop&) = delete;

  void run() override;
  void stop() override;
  [[nodiscard]] const char* name() const override { return "epoll"; }

 private:
  // The listener is readable: accept every queued connection.
  void handle_events(uint32_t events) override;
  // False when accept failed for another reason than an empty queue (out of descriptors...).
  bool accept_all();
  // Stops watching the listener for 50 ms after a failed accept, instead of spinning on it.
  void retry_accept_later();
  void add_connection(int fd, const std::string& peer);
  // Closes the connections whose incomplete request timed out, and comes back in a while.
  void sweep_frames();
  void stop_all();

  LoopContext context_;
  AcceptLog accept_log_;
  // Declared before everything registered with it, so it is destroyed after them.
  EventLoop loop_;
  LoopTimer retry_timer_;
  LoopTimer sweep_timer_;                                                 // FrameDeadlines' sweep
  std::vector<char> read_buffer_ = std::vector<char>(size_t{64} * 1024);  // shared by all
  std::unordered_map<EpollTransport*, std::unique_ptr<EpollTransport>> connections_;
  // Connections closed during the loop's current turn: later events of the turn may still
  // name them, so they are released after it.
  std::vector<std::unique_ptr<EpollTransport>> closed_;
  bool stopped_ = false;
};

}  // namespace ddp::rendezvous
