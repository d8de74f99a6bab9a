#include "rendezvous/store_session.hpp"

#include <boost/asio/write.hpp>
#include <cstdio>

#include "common/error.hpp"

namespace ddp::rendezvous {
namespace {

// Bytes asked of the kernel per read. The buffer grows by what actually arrives, never by
// what a frame claims, so garbage lengths cost nothing.
constexpr size_t kReadChunk = size_t{64} * 1024;
// A buffer this large is released once drained, so one big value does not pin memory.
constexpr size_t kKeepCapacity = size_t{1024} * 1024;
// A client that sends requests but does not read the replies stops being read once this
// much is queued for it, so its replies cannot grow the server's memory without bound.
constexpr size_t kMaxQueuedReplyBytes = size_t{16} * 1024 * 1024;

}  // namespace

StoreSession::StoreSession(boost::asio::ip::tcp::socket socket, ServerState& state,
                           const SessionConfig& config, OnClosed on_closed)
    : socket_(std::move(socket)), state_(state), config_(config), on_closed_(std::move(on_closed)) {
  boost::system::error_code ec;
  auto ep = socket_.remote_endpoint(ec);
  peer_ =
      ec ? std::string("unknown peer") : ep.address().to_string() + ":" + std::to_string(ep.port());
  socket_.set_option(boost::asio::ip::tcp::no_delay(true), ec);
}

void StoreSession::start() {
  do_read();
}

void StoreSession::stop() {
  close("");
}

void StoreSession::do_read() {
  if (closed_) return;
  if (in_begin_ == in_end_) {
    in_begin_ = in_end_ = 0;
    if (in_.capacity() > kKeepCapacity) std::vector<char>().swap(in_);
  } else if (in_begin_ > 0 && in_begin_ >= in_.size() / 2) {
    std::copy(in_.begin() + static_cast<std::ptrdiff_t>(in_begin_),
              in_.begin() + static_cast<std::ptrdiff_t>(in_end_), in_.begin());
    in_end_ -= in_begin_;
    in_begin_ = 0;
  }
  if (in_.size() < in_end_ + kReadChunk) in_.resize(in_end_ + kReadChunk);
  socket_.async_read_some(boost::asio::buffer(in_.data() + in_end_, in_.size() - in_end_),
                          [self = shared_from_this()](const boost::system::error_code& ec,
                                                      size_t n) { self->on_read(ec, n); });
}

void StoreSession::on_read(const boost::system::error_code& ec, size_t n) {
  if (closed_) return;
  if (ec) {
    if (ec == boost::asio::error::operation_aborted) return;
    const size_t buffered = in_end_ - in_begin_;
    if (state_.waiting(*this)) {
      close("connection lost in the middle of a wait (" + ec.message() + ")");
    } else if (buffered > 0) {
      close("truncated frame: connection ended (" + ec.message() + ") with " +
            std::to_string(buffered) + " bytes of an incomplete request");
    } else if (ec == boost::asio::error::eof) {
      close("");  // a client that is done; not worth a log line
    } else {
      close("read failed: " + ec.message());
    }
    return;
  }
  in_end_ += n;
  if (!process()) return;
  if (out_next_.size() + out_writing_.size() > kMaxQueuedReplyBytes) {
    read_paused_ = true;  // resumed by the write completion once the client catches up
    return;
  }
  do_read();
}

bool StoreSession::process() {
  // Replies of every request in this batch go out in one write (send() only queues).
  const bool was_writing = writing_;
  writing_ = true;
  bool open = true;
  while (open) {
    std::string_view data(in_.data() + in_begin_, in_end_ - in_begin_);
    if (data.empty() || data.size() < needed_) break;
    if (dialect_ == wire::Dialect::kUnknown) {
      const auto detected = wire::detect_dialect(data);
      if (detected.status == wire::ParseStatus::kNeedMore) {
        needed_ = wire::kHandshakeBytes;
        break;
      }
      dialect_ = detected.dialect;
      in_begin_ += detected.consumed;
      continue;
    }
    auto parsed = wire::parse_request(data, dialect_, config_.limits);
    if (parsed.status == wire::ParseStatus::kNeedMore) {
      needed_ = parsed.needed;
      break;
    }
    if (parsed.status == wire::ParseStatus::kBad) {
      close("bad request: " + parsed.error);
      open = false;
      break;
    }
    in_begin_ += parsed.consumed;
    needed_ = 0;
    try {
      state_.execute(shared_from_this(), std::move(parsed.request));
    } catch (const Error& e) {
      close(std::string("request refused: ") + e.what());
      open = false;
    }
  }
  writing_ = was_writing;
  if (open && !writing_ && !out_next_.empty()) do_write();
  return open;
}

void StoreSession::send(std::string_view bytes) {
  if (closed_) return;
  out_next_.append(bytes);
  if (!writing_) do_write();
}

void StoreSession::do_write() {
  out_writing_.clear();
  out_writing_.swap(out_next_);
  writing_ = true;
  boost::asio::async_write(
      socket_, boost::asio::buffer(out_writing_),
      [self = shared_from_this()](const boost::system::error_code& ec, size_t /*n*/) {
        self->writing_ = false;
        if (self->closed_) return;
        if (ec) {
          if (ec != boost::asio::error::operation_aborted) {
            self->close("write failed: " + ec.message());
          }
          return;
        }
        if (!self->out_next_.empty()) {
          self->do_write();
        } else if (self->read_paused_) {
          self->read_paused_ = false;
          self->do_read();
        }
      });
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
  boost::system::error_code ignored;
  socket_.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  if (on_closed_) on_closed_(this);
}

}  // namespace ddp::rendezvous
