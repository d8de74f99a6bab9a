// The io_uring engine of store_bench: every connection keeps one multishot recv armed and
// each request goes out as a send request, so one io_uring_enter per turn sends and
// receives for every connection served in it. Frames are the clients' own strings, stable
// for the whole run, so a send posts a completion only when it fails.
#include <sys/socket.h>

#include <cerrno>

#include "closed_loop.hpp"
#include "common/error.hpp"
#include "rendezvous/store/server/uring/ring.hpp"

namespace ddp::bench {
namespace {

using rendezvous::ProvidedBuffer;
using rendezvous::UringOp;
using rendezvous::UringRing;

// No reply for this long means the server is stuck: fail instead of hanging the benchmark.
constexpr long long kStallSeconds = 30;

uint64_t tag(size_t client, UringOp op) {
  return (uint64_t{client} << 3) | static_cast<uint64_t>(op);
}

void arm_recv(UringRing& ring, ClosedLoop& loop, size_t i) {
  ring.arm_multishot_recv(loop.fd(i), tag(i, UringOp::kRecv));
}

void send_frame(UringRing& ring, size_t i, int fd, std::string_view frame) {
  if (frame.empty()) return;  // this client is done
  io_uring_sqe* sqe = ring.sqe();
  io_uring_prep_send(sqe, fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_WAITALL);
  sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
  io_uring_sqe_set_data64(sqe, tag(i, UringOp::kSend));
}

}  // namespace

void run_uring(ClosedLoop& loop) {
  UringRing ring(1024, 16384, 1024, 2048);  // throws IoUringUnavailable (a StoreError)
  for (size_t i = 0; i < loop.size(); ++i) arm_recv(ring, loop, i);
  loop.start();
  for (size_t i = 0; i < loop.size(); ++i) send_frame(ring, i, loop.fd(i), loop.next(i));
  while (!loop.done()) {
    __kernel_timespec stall{kStallSeconds, 0};
    io_uring_cqe* first = nullptr;
    const int rc = io_uring_submit_and_wait_timeout(ring.raw(), &first, 1, &stall, nullptr);
    if (rc == -ETIME) {
      throw StoreError("store_bench: no reply from the server within " +
                       std::to_string(kStallSeconds) + " s");
    }
    if (rc < 0 && rc != -EINTR) throw StoreError("store_bench: io_uring_enter: " + errno_text(-rc));
    unsigned head = 0;
    unsigned seen = 0;
    io_uring_cqe* cqe = nullptr;
    io_uring_for_each_cqe(ring.raw(), head, cqe) {
      ++seen;
      const size_t i = cqe->user_data >> 3;
      if (rendezvous::uring_op(cqe->user_data) == UringOp::kSend) {
        fail_client(i, "send: " + errno_text(-cqe->res));  // only failures complete
      }
      const ProvidedBuffer buffer(ring, *cqe);
      if (!buffer.bytes().empty() && loop.received(i, buffer.bytes())) {
        send_frame(ring, i, loop.fd(i), loop.next(i));
      }
      if (cqe->res <= 0 && cqe->res != -ENOBUFS) {
        fail_client(
            i, cqe->res == 0 ? "server closed the connection" : "recv: " + errno_text(-cqe->res));
      }
      if ((cqe->flags & IORING_CQE_F_MORE) == 0) arm_recv(ring, loop, i);
    }
    io_uring_cq_advance(ring.raw(), seen);
  }
}

}  // namespace ddp::bench
