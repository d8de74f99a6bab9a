#include "rendezvous/store/server/uring/loop.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <unordered_map>
#include <vector>

#include "common/log.hpp"
#include "rendezvous/store/server/listener.hpp"
#include "rendezvous/store/server/uring/ring.hpp"
#include "rendezvous/store/server/uring/transport.hpp"

namespace ddp::rendezvous {
namespace {

// Submission entries: one turn's replies and re-armed recvs fit, more are submitted early.
constexpr unsigned kSqEntries = 1024;
// Completions one turn can collect before the kernel holds the rest back (it keeps them).
constexpr unsigned kCqEntries = 16384;
// Provided receive buffers of 2 KiB (LoopContext::io_uring_buffers of them). A request is a
// few hundred bytes; a larger frame arrives in several buffers and the session joins them.
constexpr unsigned kBufferBytes = 2048;
// After a failed accept (out of descriptors...), accepting is tried again this much later.
constexpr long long kAcceptRetryNs = 50'000'000;

class UringLoop final : public ServerLoop {
 public:
  explicit UringLoop(const LoopContext& context);
  ~UringLoop() override;
  UringLoop(const UringLoop&) = delete;
  UringLoop& operator=(const UringLoop&) = delete;

  void run() override;
  void stop() override;
  [[nodiscard]] const char* name() const override { return "io_uring"; }

 private:
  void dispatch(const io_uring_cqe& cqe);
  void on_accept(const io_uring_cqe& cqe);
  void add_connection(int fd);
  void arm_accept();
  // After a failed accept: wait 50 ms, then until a client is waiting, then accept again.
  // (The kernel takes a descriptor before it looks for a client, so retrying accept alone
  // would fail every 50 ms at the limit even with nobody refused.)
  void arm_retry_timer();
  void arm_listener_poll();
  void arm_wake();
  // Closes the connections whose incomplete request timed out every FrameDeadlines::period().
  void arm_sweep();
  void cancel(UringOp op);
  // stop() was called: close everything; run() returns once nothing is in flight.
  void begin_stop();
  void release_finished();
  [[nodiscard]] bool done() const;

  LoopContext context_;
  AcceptLog accept_log_;
  UringRing ring_;
  int wake_fd_ = -1;  // eventfd: stop() writes it, a read on the ring completes
  uint64_t wake_value_ = 0;
  __kernel_timespec retry_delay_{0, kAcceptRetryNs};
  bool accept_armed_ = false;

  bool timer_armed_ = false;
  bool poll_armed_ = false;
  bool wake_armed_ = false;
  __kernel_timespec sweep_delay_{0, 0};
  bool sweep_armed_ = false;
  bool stopping_ = false;
  std::unordered_map<UringTransport*, std::unique_ptr<UringTransport>> connections_;
  // Closed connections whose last requests have not completed yet.
  std::vector<std::unique_ptr<UringTransport>> closing_;
};

UringLoop::UringLoop(const LoopContext& context)
    : context_(context),
      accept_log_(context.port),
      ring_(kSqEntries, kCqEntries, context.io_uring_buffers, kBufferBytes) {
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC);
  if (wake_fd_ < 0) throw IoUringUnavailable("eventfd: " + errno_text(errno));
}

UringLoop::~UringLoop() {
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void UringLoop::run() {
  arm_wake();
  arm_accept();
  if (context_.sessions->frames != nullptr) {
    const auto period = std::chrono::nanoseconds(context_.sessions->frames->period());
    sweep_delay_.tv_sec = static_cast<long long>(period.count() / 1'000'000'000);
    sweep_delay_.tv_nsec = static_cast<long long>(period.count() % 1'000'000'000);
    arm_sweep();
  }
  bool reported = false;
  while (!done()) {
    if (const int rc = ring_.submit_and_wait(); rc < 0 && rc != -EINTR && rc != -ETIME) {
      if (!reported) {  // -EBUSY and the like pass; one line in case one does not
        DDP_LOG_WARN("io_uring_enter: " + errno_text(-rc));
        reported = true;
      }
    }
    unsigned head = 0;
    unsigned seen = 0;
    io_uring_cqe* cqe = nullptr;
    io_uring_for_each_cqe(ring_.raw(), head, cqe) {
      ++seen;
      try {
        dispatch(*cqe);
      } catch (const std::exception& e) {
        // A bug in one handler must not take every client's rendezvous down with it.
        DDP_LOG_WARN(std::string("unexpected error in the event loop: ") + e.what());
      }
    }
    io_uring_cq_advance(ring_.raw(), seen);
    release_finished();
  }
}

void UringLoop::stop() {
  const uint64_t one = 1;
  while (::write(wake_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

void UringLoop::dispatch(const io_uring_cqe& cqe) {
  switch (uring_op(cqe.user_data)) {
    case UringOp::kIgnore:
      return;
    case UringOp::kAccept:
      on_accept(cqe);
      return;
    case UringOp::kTimer:
      timer_armed_ = false;
      if (!stopping_) arm_listener_poll();
      return;
    case UringOp::kPoll:
      poll_armed_ = false;
      if (!stopping_ && !accept_armed_) arm_accept();
      return;
    case UringOp::kSweep:
      sweep_armed_ = false;
      if (!stopping_) {
        context_.sessions->frames->sweep(FrameDeadlines::Clock::now());
        arm_sweep();
      }
      return;
    case UringOp::kWake:
      wake_armed_ = false;
      if (cqe.res == sizeof(wake_value_)) {
        begin_stop();
      } else if (!stopping_) {
        arm_wake();
      }
      return;
    case UringOp::kRecv:
      uring_owner<UringTransport>(cqe.user_data)->on_recv(cqe);
      return;
    case UringOp::kSend:
      uring_owner<UringTransport>(cqe.user_data)->on_send(cqe);
      return;
  }
}

void UringLoop::on_accept(const io_uring_cqe& cqe) {
  if ((cqe.flags & IORING_CQE_F_MORE) == 0) accept_armed_ = false;
  bool failed = false;
  if (cqe.res >= 0) {
    if (stopping_) {
      ::close(cqe.res);
    } else {
      accept_log_.accepted();
      add_connection(cqe.res);
    }
  } else if (!stopping_ && cqe.res != -ECANCELED && cqe.res != -EINTR && cqe.res != -ECONNABORTED &&
             cqe.res != -EAGAIN) {
    // Out of descriptors or similar (this ends the multishot accept): pause instead of
    // failing at once, again and again.
    accept_log_.failed(-cqe.res, context_.num_connections->load());
    failed = true;
  }
  if (accept_armed_ || stopping_) return;
  if (failed) {
    arm_retry_timer();
  } else {
    arm_accept();  // a client that gave up, or a multishot accept the kernel ended
  }
}

void UringLoop::add_connection(int fd) {
  // A multishot accept gives no peer address, so it is asked for: a client that resets at
  // once shows as "unknown peer".
  std::string peer = peer_name(fd);
  if (context_.peers != nullptr && !context_.peers->admit(peer)) {
    ::close(fd);  // one address holds too many connections already (logged per streak)
    return;
  }
  tune_connection(fd);
  auto owned = std::make_unique<UringTransport>(fd, ring_, [this](UringTransport* c) {
    auto it = connections_.find(c);
    if (it == connections_.end()) return;  // begin_stop() holds it
    if (context_.peers != nullptr) context_.peers->release(c->session().peer());
    closing_.push_back(std::move(it->second));
    connections_.erase(it);
    --*context_.num_connections;
  });
  UringTransport* connection = owned.get();
  connection->attach(std::make_shared<StoreSession>(std::move(peer), *context_.state,
                                                    *context_.sessions, *connection));
  connections_.emplace(connection, std::move(owned));
  ++*context_.num_connections;
  try {
    connection->start();
  } catch (const Error& e) {
    connection->session().failed(std::string("cannot receive: ") + e.what());
  }
}

void UringLoop::arm_accept() {
  io_uring_sqe* sqe = ring_.sqe();
  io_uring_prep_multishot_accept(sqe, context_.listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  io_uring_sqe_set_data64(sqe, uring_tag(nullptr, UringOp::kAccept));
  accept_armed_ = true;
}

void UringLoop::arm_retry_timer() {
  io_uring_sqe* sqe = ring_.sqe();
  io_uring_prep_timeout(sqe, &retry_delay_, 0, 0);
  io_uring_sqe_set_data64(sqe, uring_tag(nullptr, UringOp::kTimer));
  timer_armed_ = true;
}

void UringLoop::arm_listener_poll() {
  io_uring_sqe* sqe = ring_.sqe();
  io_uring_prep_poll_add(sqe, context_.listen_fd, POLLIN);
  io_uring_sqe_set_data64(sqe, uring_tag(nullptr, UringOp::kPoll));
  poll_armed_ = true;
}

void UringLoop::arm_wake() {
  io_uring_sqe* sqe = ring_.sqe();
  io_uring_prep_read(sqe, wake_fd_, &wake_value_, sizeof(wake_value_), 0);
  io_uring_sqe_set_data64(sqe, uring_tag(nullptr, UringOp::kWake));
  wake_armed_ = true;
}

void UringLoop::arm_sweep() {
  io_uring_sqe* sqe = ring_.sqe();
  io_uring_prep_timeout(sqe, &sweep_delay_, 0, 0);
  io_uring_sqe_set_data64(sqe, uring_tag(nullptr, UringOp::kSweep));
  sweep_armed_ = true;
}

void UringLoop::cancel(UringOp op) {
  io_uring_sqe* sqe = ring_.sqe();
  io_uring_prep_cancel64(sqe, uring_tag(nullptr, op), 0);
  io_uring_sqe_set_data64(sqe, uring_tag(nullptr, UringOp::kIgnore));
}

void UringLoop::begin_stop() {
  stopping_ = true;
  if (accept_armed_) cancel(UringOp::kAccept);
  if (timer_armed_) cancel(UringOp::kTimer);
  if (poll_armed_) cancel(UringOp::kPoll);
  if (sweep_armed_) cancel(UringOp::kSweep);
  auto all = std::move(connections_);
  connections_.clear();
  for (auto& [ptr, connection] : all) {
    connection->session().stop();
    closing_.push_back(std::move(connection));
  }
  *context_.num_connections = 0;
  if (context_.peers != nullptr) context_.peers->clear();
}

void UringLoop::release_finished() {
  if (closing_.empty()) return;
  std::erase_if(closing_, [](const auto& c) { return c->finished(); });
}

bool UringLoop::done() const {
  return stopping_ && !accept_armed_ && !timer_armed_ && !poll_armed_ && !wake_armed_ &&
         !sweep_armed_ && connections_.empty() && closing_.empty();
}

}  // namespace

std::unique_ptr<ServerLoop> make_uring_loop(const LoopContext& context) {
  return std::make_unique<UringLoop>(context);
}

}  // namespace ddp::rendezvous
