#include "rendezvous/store/server/epoll/event_loop.hpp"

#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <exception>

#include "common/error.hpp"
#include "common/log.hpp"
#include "rendezvous/store/server/server_loop.hpp"

namespace ddp::rendezvous {
namespace {

// Ready descriptors taken per epoll_wait; more stay ready (level-triggered) for the next
// turn, after the posted work and the timers had theirs.
constexpr size_t kEventsPerTurn = 512;

OwnedFd checked(int fd, const char* what) {
  if (fd < 0)
    throw StoreError(std::string("store server: cannot create ") + what + ": " + errno_text(errno));
  return OwnedFd(fd);
}

}  // namespace

EventLoop::EventLoop(std::function<void()> after_batch)
    : after_batch_(std::move(after_batch)),
      epoll_(checked(::epoll_create1(EPOLL_CLOEXEC), "an epoll set")),
      wake_(checked(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), "an eventfd")),
      events_(kEventsPerTurn) {
  watch(wake_.get(), EPOLLIN, this);
}

EventLoop::~EventLoop() = default;

void EventLoop::watch(int fd, uint32_t events, EpollHandler* handler) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = handler;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
    throw StoreError("store server: cannot watch a new connection: " + errno_text(errno));
  }
}

bool EventLoop::rewatch(int fd, uint32_t events, EpollHandler* handler) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = handler;
  return ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev) == 0;
}

void EventLoop::forget(int fd) {
  epoll_event ignored{};
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, &ignored);
}

void EventLoop::post(std::function<void()> fn) {
  bool was_empty = false;
  {
    const std::lock_guard<std::mutex> lock(posted_mu_);
    was_empty = posted_.empty();
    posted_.push_back(std::move(fn));
  }
  // A non-empty queue has a wake-up pending already (the loop empties it after reading).
  if (!was_empty) return;
  const uint64_t one = 1;
  while (::write(wake_.get(), &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

void EventLoop::run() {
  while (!quit_) {
    const int n = ::epoll_wait(epoll_.get(), events_.data(), static_cast<int>(events_.size()), -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw StoreError("store server: epoll_wait failed: " + errno_text(errno));
    }
    for (int i = 0; i < n; ++i) {
      const epoll_event& ev = events_[static_cast<size_t>(i)];
      try {
        static_cast<EpollHandler*>(ev.data.ptr)->handle_events(ev.events);
      } catch (const std::exception& e) {
        // A bug in one handler must not take every client's rendezvous down with it.
        DDP_LOG_WARN(std::string("unexpected error in the event loop: ") + e.what());
      }
    }
    if (woken_) run_posted();
    if (after_batch_) after_batch_();
  }
}

void EventLoop::handle_events(uint32_t /*events*/) {
  uint64_t count = 0;
  while (::read(wake_.get(), &count, sizeof(count)) < 0 && errno == EINTR) {
  }
  woken_ = true;
}

void EventLoop::run_posted() {
  woken_ = false;
  std::vector<std::function<void()>> posted;
  {
    const std::lock_guard<std::mutex> lock(posted_mu_);
    posted.swap(posted_);
  }
  for (const auto& fn : posted) guarded(fn);
}

void EventLoop::guarded(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    DDP_LOG_WARN(std::string("unexpected error in the event loop: ") + e.what());
  }
}

LoopTimer::LoopTimer(EventLoop& loop, std::function<void()> on_expiry)
    : loop_(loop),
      on_expiry_(std::move(on_expiry)),
      fd_(checked(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC), "a timerfd")) {
  loop_.watch(fd_.get(), EPOLLIN, this);
}

LoopTimer::~LoopTimer() {
  loop_.forget(fd_.get());
}

void LoopTimer::start(std::chrono::milliseconds delay) {
  itimerspec spec{};
  spec.it_value.tv_sec = static_cast<time_t>(delay.count() / 1000);
  spec.it_value.tv_nsec = static_cast<long>((delay.count() % 1000) * 1'000'000);
  ::timerfd_settime(fd_.get(), 0, &spec, nullptr);
}

void LoopTimer::cancel() {
  const itimerspec disarmed{};
  ::timerfd_settime(fd_.get(), 0, &disarmed, nullptr);  // also clears an unread expiry
}

void LoopTimer::handle_events(uint32_t /*events*/) {
  uint64_t expirations = 0;
  // Nothing to read: cancelled or restarted after it fired, earlier in this turn.
  if (::read(fd_.get(), &expirations, sizeof(expirations)) != sizeof(expirations)) return;
  on_expiry_();
}

}  // namespace ddp::rendezvous
