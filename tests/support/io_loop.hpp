#pragma once
// Running a test's io_context until something happened (the handlers themselves decide when),
// always with a deadline, or for a while to show that something does not happen.
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <thread>

namespace ddp::test {

// Runs io's handlers until pred holds or timeout passes; returns pred's last value.
inline bool run_until(boost::asio::io_context& io, const std::function<bool()>& pred,
                      std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return pred();
    if (io.run_one_for(std::chrono::milliseconds(10)) == 0 && io.stopped()) {
      io.restart();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  return true;
}

// Runs io's handlers for a while (to show that something does NOT happen).
inline void run_for(boost::asio::io_context& io, std::chrono::milliseconds duration) {
  run_until(
      io, [] { return false; }, duration);
}

}  // namespace ddp::test
