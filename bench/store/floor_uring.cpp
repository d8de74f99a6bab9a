// The floor with io_uring: the same ring as the store server's (multishot accept, one
// multishot recv per connection over provided buffers, DEFER_TASKRUN), canned replies sent
// with no completion unless they fail. One io_uring_enter per turn.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "common/error.hpp"
#include "floor_server.hpp"
#include "rendezvous/store/server/uring/ring.hpp"

namespace ddp::bench {
namespace {

using rendezvous::ProvidedBuffer;
using rendezvous::UringOp;
using rendezvous::UringRing;

uint64_t tag(int fd, UringOp op) {
  return (static_cast<uint64_t>(fd) << 3) | static_cast<uint64_t>(op);
}

void arm_accept(UringRing& ring, int listener) {
  io_uring_sqe* sqe = ring.sqe();
  io_uring_prep_multishot_accept(sqe, listener, nullptr, nullptr, SOCK_CLOEXEC);
  io_uring_sqe_set_data64(sqe, tag(listener, UringOp::kAccept));
}

void arm_recv(UringRing& ring, int fd) {
  ring.arm_multishot_recv(fd, tag(fd, UringOp::kRecv));
}

}  // namespace

void serve_floor_uring(int listener, const FloorReplies& replies) {
  UringRing ring(1024, 16384, 1024, 2048);
  arm_accept(ring, listener);
  for (;;) {
    ring.submit_and_wait();
    unsigned head = 0;
    unsigned seen = 0;
    io_uring_cqe* cqe = nullptr;
    io_uring_for_each_cqe(ring.raw(), head, cqe) {
      ++seen;
      const int fd = static_cast<int>(cqe->user_data >> 3);
      const bool more = (cqe->flags & IORING_CQE_F_MORE) != 0;
      switch (rendezvous::uring_op(cqe->user_data)) {
        case UringOp::kAccept:
          if (cqe->res >= 0) {
            int one = 1;
            ::setsockopt(cqe->res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            arm_recv(ring, cqe->res);
          }
          if (!more) arm_accept(ring, listener);
          break;
        case UringOp::kRecv: {
          const ProvidedBuffer buffer(ring, *cqe);
          if (!buffer.bytes().empty()) {
            const std::string& reply = replies.to(buffer.bytes()[0]);
            io_uring_sqe* sqe = ring.sqe();
            io_uring_prep_send(sqe, fd, reply.data(), reply.size(), MSG_NOSIGNAL);
            sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
            io_uring_sqe_set_data64(sqe, tag(fd, UringOp::kIgnore));
            if (!more) arm_recv(ring, fd);
          } else if (cqe->res == -ENOBUFS) {
            if (!more) arm_recv(ring, fd);
          } else if (!more) {
            ::close(fd);  // the client left
          }
          break;
        }
        default:
          break;  // a failed send: the recv sees the end of that connection
      }
    }
    io_uring_cq_advance(ring.raw(), seen);
  }
}

}  // namespace ddp::bench
