#include "rendezvous/store_session.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "common/error.hpp"

namespace ddp::rendezvous {
namespace {

// Bytes asked of the kernel per read into a connection's own buffer (a frame larger than
// one read). That buffer grows by what actually arrives, never by what a frame claims, so
// garbage lengths cost nothing.
constexpr size_t kReadChunk = size_t{64} * 1024;
// A buffer this large is released once drained, so one big value does not pin memory.
constexpr size_t kKeepCapacity = size_t{1024} * 1024;
// A client that sends requests but does not read the replies stops being read once this
// much is queued for it, so its replies cannot grow the server's memory without bound.
constexpr size_t kMaxQueuedReplyBytes = size_t{16} * 1024 * 1024;

}  // namespace

StoreSession::StoreSession(int fd, std::string peer, ConnectionPoller& poller, ServerState& state,
                           const SessionConfig& config, std::vector<char>& read_buffer,
                           OnClosed on_closed)
    : fd_(fd),
      peer_(std::move(peer)),
      poller_(poller),
      state_(state),
      config_(config),
      read_buffer_(read_buffer),
      on_closed_(std::move(on_closed)) {}

StoreSession::~StoreSession() {
  if (fd_ >= 0) ::close(fd_);
}

void StoreSession::start() {
  poller_.add(fd_, this, EPOLLIN);
}

void StoreSession::stop() {
  close("");
}

void StoreSession::on_ready(uint32_t events) {
  if (closed_) return;  // closed earlier in this batch
  if ((events & EPOLLOUT) != 0) flush();
  if (closed_) return;
  // ERR/HUP are reported even while reading is paused; reading then finds the error or EOF.
  if ((events & (EPOLLIN | EPOLLERR | EPOLLHUP)) != 0 &&
      (!read_paused_ || (events & (EPOLLERR | EPOLLHUP)) != 0)) {
    on_readable();
  }
}

void StoreSession::on_readable() {
  // Nothing buffered (the usual case: a whole request per read): read into the loop's shared
  // buffer and keep only what is left of an incomplete frame. Otherwise append to this
  // connection's own buffer, which grows by what arrives, never by what a frame claims.
  const bool shared = in_begin_ == in_end_;
  if (shared) {
    in_begin_ = in_end_ = 0;
    if (in_.capacity() > kKeepCapacity) std::vector<char>().swap(in_);
  } else if (in_begin_ > 0) {
    std::copy(in_.begin() + static_cast<std::ptrdiff_t>(in_begin_),
              in_.begin() + static_cast<std::ptrdiff_t>(in_end_), in_.begin());
    in_end_ -= in_begin_;
    in_begin_ = 0;
  }
  if (!shared && in_.size() < in_end_ + kReadChunk) in_.resize(in_end_ + kReadChunk);
  char* dest = shared ? read_buffer_.data() : in_.data() + in_end_;
  const size_t room = shared ? read_buffer_.size() : in_.size() - in_end_;
  ssize_t n = 0;
  do {
    n = ::recv(fd_, dest, room, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // level-triggered: later
  if (n <= 0) {
    const std::string what = n == 0 ? std::string("end of stream") : errno_text(errno);
    const size_t buffered = in_end_ - in_begin_;
    if (state_.waiting(*this)) {
      close("connection lost in the middle of a wait (" + what + ")");
    } else if (buffered > 0) {
      close("truncated frame: connection ended (" + what + ") with " + std::to_string(buffered) +
            " bytes of an incomplete request");
    } else if (n == 0) {
      close("");  // a client that is done; not worth a log line
    } else {
      close("read failed: " + what);
    }
    return;
  }
  if (shared) {
    const std::string_view data(dest, static_cast<size_t>(n));
    const size_t used = process(data);
    if (closed_) return;
    if (used < data.size()) {  // keep the incomplete frame
      in_.assign(data.begin() + static_cast<std::ptrdiff_t>(used), data.end());
      in_end_ = in_.size();
    }
  } else {
    in_end_ += static_cast<size_t>(n);
    in_begin_ += process(std::string_view(in_.data(), in_end_));
    if (closed_) return;
  }
  if (queued_bytes() > kMaxQueuedReplyBytes) {
    read_paused_ = true;  // resumed by flush() once the client catches up
    update_interest();
  }
}

size_t StoreSession::process(std::string_view data) {
  // Replies of every request in this batch go out in one send (send() only queues).
  batching_ = true;
  size_t used = 0;
  while (!closed_) {
    const std::string_view rest = data.substr(used);
    if (rest.empty() || rest.size() < needed_) break;
    if (dialect_ == wire::Dialect::kUnknown) {
      const auto detected = wire::detect_dialect(rest);
      if (detected.status == wire::ParseStatus::kNeedMore) {
        needed_ = wire::kHandshakeBytes;
        break;
      }
      dialect_ = detected.dialect;
      used += detected.consumed;
      continue;
    }
    auto parsed = wire::parse_request(rest, dialect_, config_.limits);
    if (parsed.status == wire::ParseStatus::kNeedMore) {
      needed_ = parsed.needed;
      break;
    }
    if (parsed.status == wire::ParseStatus::kBad) {
      close("bad request: " + parsed.error);
      break;
    }
    used += parsed.consumed;
    needed_ = 0;
    try {
      state_.execute(shared_from_this(), std::move(parsed.request));
    } catch (const Error& e) {
      close(std::string("request refused: ") + e.what());
    }
  }
  batching_ = false;
  if (!closed_) flush();
  return used;
}

void StoreSession::send(std::string_view bytes) {
  if (closed_) return;
  out_.append(bytes);
  if (!batching_) flush();
}

void StoreSession::flush() {
  while (queued_bytes() > 0) {
    const ssize_t n = ::send(fd_, out_.data() + out_sent_, queued_bytes(), MSG_NOSIGNAL);
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
    close("write failed: " + errno_text(errno));
    return;
  }
  out_sent_ = 0;
  if (out_.capacity() > kKeepCapacity) {
    std::string().swap(out_);
  } else {
    out_.clear();
  }
  if (want_writable_ || read_paused_) {
    want_writable_ = false;
    read_paused_ = false;
    update_interest();
  }
}

void StoreSession::update_interest() {
  if (closed_) return;
  const uint32_t interest =
      (read_paused_ ? 0U : uint32_t{EPOLLIN}) | (want_writable_ ? uint32_t{EPOLLOUT} : 0U);
  if (!poller_.modify(fd_, this, interest)) close("cannot update epoll: " + errno_text(errno));
}

void StoreSession::close(const std::string& reason) {
  if (closed_) return;
  closed_ = true;
  state_.disconnect(*this);
  if (!reason.empty()) {
    // One line per closed connection, written at once so concurrent logs don't interleave.
    std::string line =
        config_.log_name + ": closing connection from " + peer_ + ": " + reason + "\n";
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
  poller_.remove(fd_);
  ::shutdown(fd_, SHUT_RDWR);
  ::close(fd_);
  fd_ = -1;
  if (on_closed_) on_closed_(this);
}

}  // namespace ddp::rendezvous
