#include "rendezvous/store/server/epoll/transport.hpp"

#include <sys/socket.h>

#include <cerrno>

#include "common/error.hpp"
#include "rendezvous/store/server/listener.hpp"

namespace ddp::rendezvous {

EpollTransport::EpollTransport(int fd, EventLoop& loop, std::vector<char>& read_buffer,
                               OnClosed on_closed)
    : fd_(fd), loop_(loop), read_buffer_(read_buffer), on_closed_(std::move(on_closed)) {}

EpollTransport::~EpollTransport() = default;

void EpollTransport::start() {
  loop_.watch(fd_.get(), EPOLLIN, this);
}

void EpollTransport::handle_events(uint32_t events) {
  if (closed_) return;  // closed earlier in this batch
  if ((events & EPOLLOUT) != 0) flush();
  if (closed_) return;
  // ERR/HUP are reported even while reading is paused; reading then finds the error or EOF.
  if ((events & (EPOLLERR | EPOLLHUP)) != 0 || ((events & EPOLLIN) != 0 && reading_)) {
    on_readable();
  }
}

void EpollTransport::on_readable() {
  ssize_t n = 0;
  do {
    n = ::recv(fd_.get(), read_buffer_.data(), read_buffer_.size(), 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // level-triggered: later
  if (n <= 0) {
    session_->read_ended(n == 0 ? 0 : errno);
    return;
  }
  session_->received(std::string_view(read_buffer_.data(), static_cast<size_t>(n)));
}

void EpollTransport::flush() {
  while (!closed_ && queued_bytes() > 0) {
    const ssize_t n = ::send(fd_.get(), out_.data() + out_sent_, queued_bytes(), MSG_NOSIGNAL);
    if (n > 0) {
      out_sent_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!want_writable_) {
        want_writable_ = true;
        update_interest();
      }
      return;
    }
    session_->failed("write failed: " + errno_text(errno));
    return;
  }
  if (closed_) return;
  out_sent_ = 0;
  clear_buffer(out_);
  if (want_writable_) {
    want_writable_ = false;
    update_interest();
  }
  session_->drained();
}

void EpollTransport::enable_liveness() {
  ::ddp::rendezvous::enable_liveness(fd_.get());
}

void EpollTransport::set_reading(bool on) {
  reading_ = on;
  update_interest();
}

void EpollTransport::update_interest() {
  if (closed_) return;
  const uint32_t interest =
      (reading_ ? uint32_t{EPOLLIN} : 0U) | (want_writable_ ? uint32_t{EPOLLOUT} : 0U);
  if (!loop_.rewatch(fd_.get(), interest, this)) {
    session_->failed("cannot update epoll: " + errno_text(errno));
  }
}

void EpollTransport::close() {
  if (closed_) return;
  closed_ = true;
  loop_.forget(fd_.get());
  ::shutdown(fd_.get(), SHUT_RDWR);
  fd_.reset();
  if (on_closed_) on_closed_(this);
}

}  // namespace ddp::rendezvous
