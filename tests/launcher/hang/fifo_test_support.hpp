#pragma once
// Helpers for the tests of the agent's FIFO readers (FifoReader, ProgressChannel,
// FileTimerServer): running their io_context until something happened, and writing lines
// into a FIFO as a worker would.
#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
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

// Opens the FIFO as a worker does (O_WRONLY|O_NONBLOCK), writes bytes in one write(2) and
// closes it; false when there is no reader or the write failed.
inline bool write_fifo(const std::filesystem::path& path, std::string_view bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = ::write(fd, bytes.data(), bytes.size());
  ::close(fd);
  return n == static_cast<ssize_t>(bytes.size());
}

inline double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A file-timer request line exactly as torch's FileTimerRequest.to_json() writes it (plus
// the newline), and its release (expiration_time -1, signal 0).
inline std::string timer_request(int pid, const std::string& scope, double expiration_time,
                                 int signal) {
  nlohmann::json doc = {{"version", 1},
                        {"pid", pid},
                        {"scope_id", scope},
                        {"expiration_time", expiration_time},
                        {"signal", signal}};
  return doc.dump() + "\n";
}
inline std::string timer_release(int pid, const std::string& scope) {
  return timer_request(pid, scope, -1, 0);
}

}  // namespace ddp::test
