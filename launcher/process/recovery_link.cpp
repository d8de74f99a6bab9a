#include "launcher/process/recovery_link.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <deque>

#include "common/error.hpp"
#include "common/log.hpp"

namespace ddp::launcher {
namespace asio = boost::asio;

// Shared with the pending handlers, so a handler finishing after the link is gone finds its
// state alive and the `closed` flag set.
struct RecoveryLink::State {
  explicit State(asio::io_context& io) : socket(io), input(recovery::kMaxLineBytes) {}

  asio::local::stream_protocol::socket socket;
  asio::streambuf input;
  std::deque<std::string> output;  // front: being written
  MessageHandler on_message;
  bool closed = false;

  static void read(const std::shared_ptr<State>& self) {
    asio::async_read_until(
        self->socket, self->input, '\n', [self](boost::system::error_code ec, size_t n) {
          if (self->closed) return;
          if (ec) return;  // the worker is gone: its exit says the rest
          std::string line(
              asio::buffers_begin(self->input.data()),
              asio::buffers_begin(self->input.data()) + static_cast<std::ptrdiff_t>(n));
          self->input.consume(n);
          std::string error;
          if (auto message = recovery::parse(line, &error)) {
            self->on_message(*message);
          } else {
            DDP_LOG_WARN("ignoring a bad line on a recovery channel: " + error);
          }
          if (!self->closed) read(self);
        });
  }

  static void write(const std::shared_ptr<State>& self) {
    asio::async_write(self->socket, asio::buffer(self->output.front()),
                      [self](boost::system::error_code ec, size_t) {
                        if (self->closed) return;
                        if (ec) {
                          self->output.clear();
                          return;
                        }
                        self->output.pop_front();
                        if (!self->output.empty()) write(self);
                      });
  }
};

RecoveryLink::RecoveryLink(asio::io_context& io, MessageHandler on_message)
    : state_(std::make_shared<State>(io)) {
  int fds[2] = {-1, -1};
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    throw Error("cannot make a recovery channel (socketpair): " + errno_text(errno));
  }
  state_->socket.assign(asio::local::stream_protocol(), fds[0]);
  child_fd_ = fds[1];
  state_->on_message = std::move(on_message);
  State::read(state_);
}

RecoveryLink::~RecoveryLink() {
  close_child_end();
  state_->closed = true;
  boost::system::error_code ignored;
  state_->socket.close(ignored);
}

void RecoveryLink::close_child_end() {
  if (child_fd_ >= 0) ::close(child_fd_);
  child_fd_ = -1;
}

void RecoveryLink::send(const recovery::Message& message) {
  if (state_->closed) return;
  state_->output.push_back(recovery::format(message));
  if (state_->output.size() == 1) State::write(state_);
}

}  // namespace ddp::launcher
