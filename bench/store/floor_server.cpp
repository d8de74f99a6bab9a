// store_floor_server: the floor for the store benchmark, not a store. It answers
// store_bench's legacy-dialect load ([SET k v + GET k] and [ADD k 1] round trips) with canned
// replies of the right size: no parsing, no map, one level-triggered epoll set, one recv and
// one send per round trip. Whatever it reaches is the most any server can serve on this
// machine for that load; scripts/bench/store.sh measures it beside ours and PyTorch's.
//   store_floor_server [--value-bytes 64]     prints the bound port, serves until killed
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "rendezvous/wire_codec.hpp"

namespace {

namespace wire = ddp::rendezvous::wire;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "store_floor_server: %s: %s\n", what, ddp::errno_text(errno).c_str());
  std::exit(1);
}

int listen_loopback() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) die("socket");
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) die("bind");
  if (::listen(fd, SOMAXCONN) != 0) die("listen");
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  std::printf("%d\n", ntohs(address.sin_port));
  std::fflush(stdout);
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  size_t value_bytes = 64;
  CLI::App app{"store_floor_server: canned replies to store_bench's legacy load (a floor)"};
  app.add_option("--value-bytes", value_bytes, "size of the value a GET returns")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::string get_reply;  // what a GET of a bench key returns
  wire::put_string(get_reply, std::string(value_bytes, 'x'));
  std::string add_reply;  // what an ADD returns (the count is not checked by the load)
  wire::put_i64(add_reply, 1);

  const int listener = listen_loopback();
  const int epoll = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll < 0) die("epoll_create1");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listener;
  if (::epoll_ctl(epoll, EPOLL_CTL_ADD, listener, &ev) != 0) die("epoll_ctl");
  std::vector<char> buffer(size_t{64} * 1024);
  std::vector<epoll_event> events(512);
  for (;;) {
    const int n = ::epoll_wait(epoll, events.data(), static_cast<int>(events.size()), -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die("epoll_wait");
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
      // One round trip per recv (closed loop): a SET frame starts with command 0 and rides
      // with its GET; anything else here is an ADD.
      const std::string& reply = buffer[0] == 0 ? get_reply : add_reply;
      ::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
    }
  }
}
