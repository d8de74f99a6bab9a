#pragma once
// Slow-loris protection: the sessions holding part of a request, and since when. A loop
// sweeps it every period() and closes those past the timeout, so a client cannot pin a
// connection (and its buffered bytes) by sending half a frame and stopping. Sessions that
// sent nothing, or whose wait is parked, are not in it: only incomplete frames count.
#include <chrono>
#include <unordered_map>

namespace ddp::rendezvous {

class StoreSession;

class FrameDeadlines {
 public:
  using Clock = std::chrono::steady_clock;

  explicit FrameDeadlines(std::chrono::milliseconds timeout) : timeout_(timeout) {}

  // session now holds part of a request that started arriving at `since` (restarts the clock
  // when the session made progress).
  void started(StoreSession* session, Clock::time_point since) { open_[session] = since; }
  // session holds no incomplete request any more (or is not being read, or closed).
  void finished(StoreSession* session) { open_.erase(session); }
  // session is closed by the next sweep, whatever the timeout (it cannot close where it is).
  void expire(StoreSession* session) { open_[session] = Clock::time_point::min(); }
  // Closes every session past the timeout (StoreSession::frame_timed_out); returns how many.
  size_t sweep(Clock::time_point now);
  // How often a loop should sweep: a quarter of the timeout, from 10 ms to 1 s.
  [[nodiscard]] std::chrono::milliseconds period() const;
  [[nodiscard]] std::chrono::milliseconds timeout() const { return timeout_; }
  [[nodiscard]] size_t size() const { return open_.size(); }

 private:
  std::chrono::milliseconds timeout_;
  std::unordered_map<StoreSession*, Clock::time_point> open_;
};

}  // namespace ddp::rendezvous
