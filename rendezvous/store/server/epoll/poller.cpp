#include "rendezvous/store/server/epoll/poller.hpp"

#include <unistd.h>

#include <cerrno>

#include "common/error.hpp"

namespace ddp::rendezvous {
namespace {

// Ready sockets taken per epoll_wait; more stay ready (level-triggered) for the next turn,
// after the acceptor and timers had theirs.
constexpr size_t kEventsPerTurn = 512;

int create_epoll() {
  const int fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (fd < 0) throw StoreError("store server: cannot create an epoll set: " + errno_text(errno));
  return fd;
}

}  // namespace

ConnectionPoller::ConnectionPoller(boost::asio::io_context& io, std::function<void()> after_batch)
    : descriptor_(io, create_epoll()),
      after_batch_(std::move(after_batch)),
      events_(kEventsPerTurn) {}

void ConnectionPoller::start() {
  wait();
}

void ConnectionPoller::add(int fd, PollTarget* target, uint32_t interest) {
  epoll_event ev{};
  ev.events = interest;
  ev.data.ptr = target;
  if (::epoll_ctl(descriptor_.native_handle(), EPOLL_CTL_ADD, fd, &ev) != 0) {
    throw StoreError("store server: cannot watch a new connection: " + errno_text(errno));
  }
}

bool ConnectionPoller::modify(int fd, PollTarget* target, uint32_t interest) {
  epoll_event ev{};
  ev.events = interest;
  ev.data.ptr = target;
  return ::epoll_ctl(descriptor_.native_handle(), EPOLL_CTL_MOD, fd, &ev) == 0;
}

void ConnectionPoller::remove(int fd) {
  if (stopped_) return;
  epoll_event ignored{};
  ::epoll_ctl(descriptor_.native_handle(), EPOLL_CTL_DEL, fd, &ignored);
}

void ConnectionPoller::stop() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ignored;
  descriptor_.close(ignored);  // cancels the pending wait
}

void ConnectionPoller::wait() {
  descriptor_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                         [this](const boost::system::error_code& ec) {
                           if (ec || stopped_) return;
                           dispatch();
                           if (!stopped_) wait();
                         });
}

void ConnectionPoller::dispatch() {
  const int n = ::epoll_wait(descriptor_.native_handle(), events_.data(),
                             static_cast<int>(events_.size()), 0);
  for (int i = 0; i < n; ++i) {
    const epoll_event& ev = events_[static_cast<size_t>(i)];
    static_cast<PollTarget*>(ev.data.ptr)->on_ready(ev.events);
  }
  if (after_batch_) after_batch_();
}

}  // namespace ddp::rendezvous
