#pragma once
// Helpers for the tests of the agent's FIFO readers (FifoReader, ProgressChannel,
// FileTimerServer): running their io_context until something happened (io_loop.hpp), and
// writing lines into a FIFO as a worker would.
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

#include "common/progress_protocol.hpp"
#include "tests/support/io_loop.hpp"

namespace ddp::test {

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

// The progress line (common/progress_protocol.hpp) of a rank at step, entering or leaving
// collective op #seq.
inline std::string progress_line(int rank, int pid, int64_t step, int64_t seq,
                                 progress::Phase phase, const std::string& op = "all_reduce") {
  progress::Report report;
  report.rank = rank;
  report.pid = pid;
  report.step = step;
  report.op = op;
  report.seq = seq;
  report.phase = phase;
  return progress::format(report);
}

}  // namespace ddp::test
