// The floor with epoll: one level-triggered epoll set, one recv and one send per round trip.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "common/error.hpp"
#include "floor_server.hpp"

namespace ddp::bench {

void serve_floor_epoll(int listener, const FloorReplies& replies) {
  const int epoll = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listener;
  if (epoll < 0 || ::epoll_ctl(epoll, EPOLL_CTL_ADD, listener, &ev) != 0) {
    throw Error("epoll: " + errno_text(errno));
  }
  std::vector<char> buffer(size_t{64} * 1024);
  std::vector<epoll_event> events(512);
  for (;;) {
    const int n = ::epoll_wait(epoll, events.data(), static_cast<int>(events.size()), -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("epoll_wait: " + errno_text(errno));
    for (int i = 0; i < n; ++i) {
      const int fd = events[static_cast<size_t>(i)].data.fd;
      if (fd == listener) {
        int client = -1;
        while ((client = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >=
               0) {
          int one = 1;
          ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          epoll_event cev{};
          cev.events = EPOLLIN;
          cev.data.fd = client;
          if (::epoll_ctl(epoll, EPOLL_CTL_ADD, client, &cev) != 0) ::close(client);
        }
        continue;
      }
      const ssize_t got = ::recv(fd, buffer.data(), buffer.size(), 0);
      if (got <= 0) {
        if (got < 0 && errno == EAGAIN) continue;
        ::close(fd);
        continue;
      }
      const std::string& reply = replies.to(buffer[0]);
      ::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
    }
  }
}

}  // namespace ddp::bench
