#pragma once
// The epoll backend: one Boost.Asio io_context on the server's thread. The listener and the
// client sockets sit in one level-triggered epoll set (ConnectionPoller) that the Asio loop
// waits on; the accept-retry timer and stop() are ordinary Asio operations. Works on every
// Linux; StoreServer uses it where io_uring is unavailable or DDPLAUNCH_STORE_IO=epoll.
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <unordered_map>
#include <vector>

#include "rendezvous/store/server/epoll/poller.hpp"
#include "rendezvous/store/server/epoll/transport.hpp"
#include "rendezvous/store/server/listener.hpp"
#include "rendezvous/store/server/server_loop.hpp"

namespace ddp::rendezvous {

class EpollLoop final : public ServerLoop, private PollTarget {
 public:
  // Throws StoreError when the epoll set cannot be created.
  explicit EpollLoop(const LoopContext& context);
  ~EpollLoop() override;
  EpollLoop(const EpollLoop&) = delete;
  EpollLoop& operator=(const EpollLoop&) = delete;

  void run() override;
  void stop() override;
  [[nodiscard]] const char* name() const override { return "epoll"; }

 private:
  // The listener is readable: accept every queued connection.
  void on_ready(uint32_t events) override;
  // False when accept failed for another reason than an empty queue (out of descriptors...).
  bool accept_all();
  // Stops watching the listener for 50 ms after a failed accept, instead of spinning on it.
  void retry_accept_later();
  void add_connection(int fd, const std::string& peer);
  void stop_all();

  // Declared first so it is destroyed last: the timer and the poller are its.
  boost::asio::io_context io_{1};  // one thread runs the loop; others only post stop()
  LoopContext context_;
  AcceptLog accept_log_;
  boost::asio::steady_timer retry_timer_;
  ConnectionPoller poller_;
  std::vector<char> read_buffer_ = std::vector<char>(size_t{64} * 1024);  // shared by all
  std::unordered_map<EpollTransport*, std::unique_ptr<EpollTransport>> connections_;
  // Connections closed during the poller's current batch: later events of the batch may
  // still name them, so they are released after it.
  std::vector<std::unique_ptr<EpollTransport>> closed_;
  bool stopped_ = false;
};

}  // namespace ddp::rendezvous
