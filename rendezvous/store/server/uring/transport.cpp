#include "rendezvous/store/server/uring/transport.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "common/error.hpp"
#include "rendezvous/store/server/listener.hpp"

namespace ddp::rendezvous {

UringTransport::UringTransport(int fd, UringRing& ring, OnClosed on_closed)
    : fd_(fd), ring_(ring), on_closed_(std::move(on_closed)) {}

UringTransport::~UringTransport() {
  if (fd_ >= 0) ::close(fd_);
}

void UringTransport::arm_recv() {
  ring_.arm_multishot_recv(fd_, uring_tag(this, UringOp::kRecv));
  recv_armed_ = true;
  ++in_flight_;
}

void UringTransport::on_recv(const io_uring_cqe& cqe) {
  if ((cqe.flags & IORING_CQE_F_MORE) == 0) {  // this recv is over; it may be armed again
    recv_armed_ = false;
    --in_flight_;
  }
  {
    const ProvidedBuffer buffer(ring_, cqe);
    if (!buffer.bytes().empty() && !closed_) session_->received(buffer.bytes());
  }
  if (closed_) return;
  // Bytes, no provided buffer left (-ENOBUFS) or set_reading(false)'s cancel: not the end of
  // the connection. Anything else is: end of stream (0) or an error.
  if (cqe.res > 0 || cqe.res == -ENOBUFS || cqe.res == -ECANCELED) {
    if (recv_armed_ || !reading_) return;
    try {
      arm_recv();
    } catch (const Error& e) {
      session_->failed(std::string("cannot receive: ") + e.what());
    }
    return;
  }
  session_->read_ended(cqe.res == 0 ? 0 : -cqe.res);
}

void UringTransport::flush() {
  if (closed_ || send_in_flight_ || queued_.empty()) return;
  sending_.swap(queued_);
  queued_.clear();
  sent_ = 0;
  send_rest();
}

void UringTransport::send_rest() {
  io_uring_sqe* sqe = ring_.sqe();
  // MSG_WAITALL: the kernel finishes a short send itself before completing.
  io_uring_prep_send(sqe, fd_, sending_.data() + sent_, sending_.size() - sent_,
                     MSG_NOSIGNAL | MSG_WAITALL);
  io_uring_sqe_set_data64(sqe, uring_tag(this, UringOp::kSend));
  send_in_flight_ = true;
  ++in_flight_;
}

void UringTransport::on_send(const io_uring_cqe& cqe) {
  send_in_flight_ = false;
  --in_flight_;
  if (closed_) return;
  if (cqe.res <= 0) {
    session_->failed("write failed: " + errno_text(cqe.res < 0 ? -cqe.res : EPIPE));
    return;
  }
  sent_ += static_cast<size_t>(cqe.res);
  if (sent_ < sending_.size()) {
    send_rest();
    return;
  }
  sent_ = 0;
  clear_buffer(sending_);
  if (!queued_.empty()) {
    flush();
    return;
  }
  session_->drained();
}

void UringTransport::enable_liveness() {
  ::ddp::rendezvous::enable_liveness(fd_);
}

void UringTransport::set_reading(bool on) {
  reading_ = on;
  if (closed_) return;
  if (on && !recv_armed_) {
    arm_recv();
  } else if (!on && recv_armed_) {
    io_uring_sqe* sqe = ring_.sqe();
    io_uring_prep_cancel64(sqe, uring_tag(this, UringOp::kRecv), 0);
    io_uring_sqe_set_data64(sqe, uring_tag(nullptr, UringOp::kIgnore));
  }
}

void UringTransport::close() {
  if (closed_) return;
  closed_ = true;
  // Replies prepared in this turn go out first, as epoll's send() would have sent them
  // already: a client that sends its last request and then its end of stream (both in one
  // turn) still gets the reply.
  if (send_in_flight_) ring_.submit();
  // shutdown ends an armed recv and a blocked send at once; the cancel makes sure of it. The
  // descriptor stays open until the connection is released (no request of it in flight), so
  // its number cannot be reused by a new connection while a request still names it.
  ::shutdown(fd_, SHUT_RDWR);
  if (in_flight_ > 0) {
    io_uring_sqe* sqe = ring_.sqe();
    io_uring_prep_cancel_fd(sqe, fd_, IORING_ASYNC_CANCEL_ALL);
    io_uring_sqe_set_data64(sqe, uring_tag(nullptr, UringOp::kIgnore));
  }
  if (on_closed_) on_closed_(this);
}

}  // namespace ddp::rendezvous
