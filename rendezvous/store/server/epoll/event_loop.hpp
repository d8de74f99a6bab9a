#pragma once
// A plain epoll loop, in the shape of Gloo's transport/tcp/loop: one level-triggered epoll
// set whose every descriptor names an EpollHandler, one eventfd through which other threads
// post work (StoreServer::stop()), and timerfd timers in the same set. One thread runs it;
// only post() may be called from others.
//
// Why readiness and not one read operation per socket: a read that starts with a
// speculative recv (Boost.Asio's async_read_some does) fails with EAGAIN on every round trip
// of a closed-loop client (every TCPStore client: one request in flight), as its next
// request is never there when the reply has just gone out. Level-triggered readiness costs
// exactly one recv per request and one epoll_wait per loop turn for every ready socket.
#include <sys/epoll.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "rendezvous/store/server/epoll/owned_fd.hpp"

namespace ddp::rendezvous {

// What the loop hands readiness to: one per registered descriptor (Gloo's tcp::Handler).
class EpollHandler {
 public:
  virtual ~EpollHandler() = default;
  // The descriptor has `events` (EPOLLIN, EPOLLOUT, EPOLLERR, EPOLLHUP bits).
  virtual void handle_events(uint32_t events) = 0;
};

class EventLoop final : private EpollHandler {
 public:
  // after_batch runs once every descriptor ready at one
  // wake-up was handled: handlers closed during the batch may be destroyed only then (later
  // events of the batch may still name them). Throws StoreError when the epoll set or the
  // eventfd cannot be created.
  explicit EventLoop(std::function<void()> after_batch);
  ~EventLoop() override;
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Registers fd for `events` (EPOLLIN and/or EPOLLOUT, or 0); throws StoreError on failure.
  void watch(int fd, uint32_t events, EpollHandler* handler);
  // Changes fd's events; returns false (errno set) when epoll refuses.
  bool rewatch(int fd, uint32_t events, EpollHandler* handler);
  // Forgets fd (call before closing it).
  void forget(int fd);
  // From any thread: fn runs on the loop's thread, after the handlers of the current turn.
  void post(std::function<void()> fn);
  // Waits and dispatches until quit(); an exception from a handler is logged, not fatal.
  // Throws StoreError when epoll_wait itself fails.
  void run();
  // On the loop's thread: run() returns at the end of this turn.
  void quit() { quit_ = true; }

 private:
  // The eventfd is readable: post() queued work.
  void handle_events(uint32_t events) override;
  void run_posted();
  void guarded(const std::function<void()>& fn);

  std::function<void()> after_batch_;
  OwnedFd epoll_;
  OwnedFd wake_;  // eventfd: post() writes it when its queue was empty
  std::vector<epoll_event> events_;
  bool woken_ = false;  // the eventfd fired this turn: run the posted work after the handlers
  bool quit_ = false;
  std::mutex posted_mu_;
  std::vector<std::function<void()>> posted_;
};

// A one-shot timer on an EventLoop: a timerfd in its epoll set. on_expiry runs on the loop's
// thread. The loop must outlive the timer.
class LoopTimer final : private EpollHandler {
 public:
  // Throws StoreError when the timerfd cannot be created or watched.
  LoopTimer(EventLoop& loop, std::function<void()> on_expiry);
  ~LoopTimer() override;
  LoopTimer(const LoopTimer&) = delete;
  LoopTimer& operator=(const LoopTimer&) = delete;

  // Expires once, `delay` (more than zero) from now; replaces an expiry still pending.
  void start(std::chrono::milliseconds delay);
  // Drops a pending expiry, even one already due but not yet handled.
  void cancel();

 private:
  void handle_events(uint32_t events) override;

  EventLoop& loop_;
  std::function<void()> on_expiry_;
  OwnedFd fd_;
};

}  // namespace ddp::rendezvous
