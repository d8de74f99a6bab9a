// Deadline: time left, expiry, poll() timeouts, and "never" that does not overflow.
#include "common/deadline.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

using ddp::Deadline;
using namespace std::chrono_literals;
using ms = std::chrono::milliseconds;

TEST_CASE("deadline: a timeout from now counts down and expires", "[deadline]") {
  const Deadline d = Deadline::after(80ms);
  CHECK_FALSE(d.is_never());
  CHECK_FALSE(d.expired());
  CHECK(d.remaining() > 0ms);
  CHECK(d.remaining() <= 80ms);
  CHECK(d.poll_timeout_ms() >= 1);
  CHECK(d.poll_timeout_ms() <= 80);
  std::this_thread::sleep_for(100ms);
  CHECK(d.expired());
  CHECK(d.remaining() == 0ms);  // never negative
  CHECK(d.poll_timeout_ms() == 0);
}

TEST_CASE("deadline: zero and negative timeouts have expired already", "[deadline]") {
  for (const ms timeout : {0ms, -5ms}) {
    const Deadline d = Deadline::after(timeout);
    CHECK(d.expired());
    CHECK(d.remaining() == 0ms);
    CHECK(d.poll_timeout_ms() == 0);
  }
}

TEST_CASE("deadline: never, and timeouts past the clock's range, do not expire", "[deadline]") {
  // The steady clock counts nanoseconds in 64 bits: about 292 years from its epoch.
  for (const Deadline d : {Deadline::never(), Deadline::after(ms::max()),
                           Deadline::after(ms::max() - 1ms), Deadline::after(ms::max() / 2)}) {
    CHECK(d.is_never());
    CHECK_FALSE(d.expired());
    CHECK(d.remaining() == ms::max());
    CHECK(d.poll_timeout_ms() == -1);
  }
}

TEST_CASE("deadline: poll timeouts are capped and rounded up", "[deadline]") {
  CHECK(Deadline::after(std::chrono::hours(24 * 365)).poll_timeout_ms() == 1 << 30);
  // 1.5 ms left: poll(2), not poll(1) that returns before the deadline, nor a busy poll(0).
  const Deadline soon = Deadline::at(Deadline::Clock::now() + std::chrono::microseconds(1500));
  CHECK(soon.poll_timeout_ms() >= 1);
  CHECK(soon.poll_timeout_ms() <= 2);
}

TEST_CASE("deadline: slice bounds one wait of a progress loop, at least 1 ms", "[deadline]") {
  CHECK(Deadline::after(10s).slice(100ms) == 100ms);
  const ms small = Deadline::after(50ms).slice(1s);
  CHECK(small > 0ms);
  CHECK(small <= 50ms);
  CHECK(Deadline::after(0ms).slice(100ms) == 1ms);
  CHECK(Deadline::never().slice(250ms) == 250ms);
}

TEST_CASE("deadline: the earlier of two deadlines", "[deadline]") {
  const Deadline a = Deadline::after(1s);
  const Deadline b = Deadline::after(1h);
  CHECK(std::min(a, b) == a);
  CHECK(std::min(Deadline::never(), a) == a);
  CHECK(Deadline::at(a.time_point()) == a);
}
