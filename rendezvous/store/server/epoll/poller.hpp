#pragma once
// The store server's client sockets in one level-triggered epoll set, driven from the
// server's Asio loop: the loop waits on the set's descriptor, and each wake-up hands every
// ready socket to its owner.
//
// Why not one Asio operation per socket: Asio starts every read with a speculative recv.
// A closed-loop client (every TCPStore client: one request in flight) never has its next
// request there when the reply has just gone out, so that recv fails with EAGAIN on every
// round trip: two recvfrom per sendto, measured with perf. Level-triggered readiness costs
// exactly one recv per request, and the per-socket Asio bookkeeping (locks, handler
// allocations, a queue hop per completion) is gone from the hot path. Accepting, timers and
// stop() stay plain Asio on the same loop and thread.
#include <sys/epoll.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <functional>
#include <vector>

namespace ddp::rendezvous {

// What the poller hands readiness to: one per registered socket.
class PollTarget {
 public:
  virtual ~PollTarget() = default;
  // The socket has `events` (EPOLLIN, EPOLLOUT, EPOLLERR, EPOLLHUP bits).
  virtual void on_ready(uint32_t events) = 0;
};

class ConnectionPoller {
 public:
  // after_batch runs once all the sockets ready at one wake-up were handled; targets closed
  // during the batch may be destroyed only then (later events of the batch still name them).
  // Throws StoreError when the epoll set cannot be created.
  ConnectionPoller(boost::asio::io_context& io, std::function<void()> after_batch);
  ConnectionPoller(const ConnectionPoller&) = delete;
  ConnectionPoller& operator=(const ConnectionPoller&) = delete;

  // Starts waiting for readiness on the io_context's thread.
  void start();
  // Registers fd for `interest` (EPOLLIN and/or EPOLLOUT); throws StoreError on failure.
  void add(int fd, PollTarget* target, uint32_t interest);
  // Changes fd's interest; returns false (errno set) when epoll refuses.
  bool modify(int fd, PollTarget* target, uint32_t interest);
  // Forgets fd (call before closing it).
  void remove(int fd);
  // Stops waiting and closes the epoll set. Idempotent.
  void stop();

 private:
  void wait();
  void dispatch();

  boost::asio::posix::stream_descriptor descriptor_;  // owns the epoll descriptor
  std::function<void()> after_batch_;
  std::vector<epoll_event> events_;
  bool stopped_ = false;
};

}  // namespace ddp::rendezvous
