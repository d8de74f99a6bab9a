#pragma once
// Deadline: a point on the steady clock by which a blocking call must return. Every wait in
// the project is bounded by one (style.md 9); milliseconds::max() means "never" and is kept
// as such instead of overflowing the clock.
#include <algorithm>
#include <chrono>
#include <cstdint>

namespace ddp {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  // `timeout` from now. milliseconds::max() (kNoTimeout) and timeouts past the clock's range
  // never expire; zero or negative ones have expired already.
  static Deadline after(std::chrono::milliseconds timeout) {
    if (timeout == std::chrono::milliseconds::max()) return never();
    const auto now = Clock::now();
    if (timeout >
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now)) {
      return never();
    }
    return Deadline(now + timeout);
  }
  static Deadline never() { return Deadline(Clock::time_point::max()); }
  static Deadline at(Clock::time_point when) { return Deadline(when); }

  [[nodiscard]] bool is_never() const { return when_ == Clock::time_point::max(); }
  [[nodiscard]] bool expired() const { return !is_never() && Clock::now() >= when_; }
  // Time left, rounded down, never negative; milliseconds::max() when it never expires.
  [[nodiscard]] std::chrono::milliseconds remaining() const {
    if (is_never()) return std::chrono::milliseconds::max();
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(when_ - Clock::now());
    return std::max(left, std::chrono::milliseconds(0));
  }
  // One wait of a loop that wakes at least every at_most (to log progress, to re-check a
  // flag): min(remaining(), at_most), but at least 1 ms, so a store wait never gets a zero
  // timeout. The loop still ends on expired().
  [[nodiscard]] std::chrono::milliseconds slice(std::chrono::milliseconds at_most) const {
    return std::max(std::min(remaining(), at_most), std::chrono::milliseconds(1));
  }
  // The timeout argument of poll(): -1 for never, else the time left rounded up (poll must
  // not return before the deadline), 0 once passed, capped at 2^30 ms.
  [[nodiscard]] int poll_timeout_ms() const {
    if (is_never()) return -1;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(when_ - Clock::now());
    return static_cast<int>(std::clamp<int64_t>(left.count(), 0, int64_t{1} << 30));
  }
  [[nodiscard]] Clock::time_point time_point() const { return when_; }

  friend bool operator<(const Deadline& a, const Deadline& b) { return a.when_ < b.when_; }
  friend bool operator==(const Deadline& a, const Deadline& b) { return a.when_ == b.when_; }

 private:
  explicit Deadline(Clock::time_point when) : when_(when) {}
  Clock::time_point when_;
};

}  // namespace ddp
