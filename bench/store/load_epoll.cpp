// The epoll engine of store_bench: the sockets in one level-triggered epoll set, one recv
// per readiness (never a failing one) and one send per request.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "closed_loop.hpp"
#include "common/error.hpp"

namespace ddp::bench {
namespace {

// No reply for this long means the server is stuck: fail instead of hanging the benchmark.
constexpr int kStallMs = 30'000;

}  // namespace

void run_epoll(ClosedLoop& loop) {
  const int epoll = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll < 0) throw StoreError("store_bench: epoll_create1: " + errno_text(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{epoll};
  for (size_t i = 0; i < loop.size(); ++i) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    if (::epoll_ctl(epoll, EPOLL_CTL_ADD, loop.fd(i), &ev) != 0) {
      fail_client(i, "epoll_ctl: " + errno_text(errno));
    }
  }
  loop.start();
  for (size_t i = 0; i < loop.size(); ++i) send_all(loop.fd(i), loop.next(i), i);
  std::vector<epoll_event> events(std::min<size_t>(loop.size(), 1024));
  char buffer[4096];
  while (!loop.done()) {
    const int ready = ::epoll_wait(epoll, events.data(), static_cast<int>(events.size()), kStallMs);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) throw StoreError("store_bench: epoll_wait: " + errno_text(errno));
    if (ready == 0) {
      throw StoreError("store_bench: no reply from the server within " +
                       std::to_string(kStallMs / 1000) + " s");
    }
    for (int k = 0; k < ready; ++k) {
      const size_t i = events[static_cast<size_t>(k)].data.u64;
      const ssize_t got = ::recv(loop.fd(i), buffer, sizeof(buffer), 0);
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (got <= 0) {
        fail_client(i, got == 0 ? "server closed the connection" : "recv: " + errno_text(errno));
      }
      if (loop.received(i, std::string_view(buffer, static_cast<size_t>(got)))) {
        send_all(loop.fd(i), loop.next(i), i);
      }
    }
  }
}

}  // namespace ddp::bench
