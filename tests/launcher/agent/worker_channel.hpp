#pragma once
// A fake worker's end of its in-place recovery channel (common/recovery_protocol.hpp), over
// the real socketpair the agent makes: what the agent sends arrives on the loop, and the
// worker's lines are written as the runtime writes them.
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <catch2/catch.hpp>
#include <cerrno>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "common/recovery_protocol.hpp"

namespace ddp::launcher::testing {

// Lines from the agent go to on_message, on io's thread; send() writes one line (a few
// bytes: never blocks on a fresh socketpair).
class WorkerChannel {
 public:
  WorkerChannel(boost::asio::io_context& io, int fd,
                std::function<void(const recovery::Message&)> on_message)
      : socket_(io), fd_(::dup(fd)), on_message_(std::move(on_message)) {
    socket_.assign(boost::asio::local::stream_protocol(), ::dup(fd));
    read();
  }
  ~WorkerChannel() { ::close(fd_); }
  WorkerChannel(const WorkerChannel&) = delete;
  WorkerChannel& operator=(const WorkerChannel&) = delete;

  // Like the runtime: a line to an agent that closed this channel (it replaced the worker) is
  // lost, never a SIGPIPE.
  void send(const recovery::Message& message) const {
    const std::string line = recovery::format(message);
    const ssize_t n = ::send(fd_, line.data(), line.size(), MSG_NOSIGNAL);
    REQUIRE((n == static_cast<ssize_t>(line.size()) || (n < 0 && errno == EPIPE)));
  }

 private:
  void read() {
    boost::asio::async_read_until(
        socket_, input_, '\n', [this](boost::system::error_code ec, size_t n) {
          if (ec) return;
          std::string line(
              boost::asio::buffers_begin(input_.data()),
              boost::asio::buffers_begin(input_.data()) + static_cast<std::ptrdiff_t>(n));
          input_.consume(n);
          auto message = recovery::parse(line, nullptr);
          REQUIRE(message);
          on_message_(*message);
          read();
        });
  }

  boost::asio::local::stream_protocol::socket socket_;
  boost::asio::streambuf input_;
  int fd_;
  std::function<void(const recovery::Message&)> on_message_;
};

// A protocol message of type with integer fields.
inline recovery::Message make_message(std::string_view type,
                                      const std::map<std::string, int64_t>& fields) {
  recovery::Message m;
  m.type = std::string(type);
  for (const auto& [key, value] : fields) m.set(key, value);
  return m;
}

}  // namespace ddp::launcher::testing
