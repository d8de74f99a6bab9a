// store_floor_server: the floor for the store benchmark, not a store. It answers
// store_bench's load ([SET k v + GET k] and [ADD k 1] round trips) with canned
// replies of the right size: no parsing, no map, one receive and one send per round trip.
// Whatever it reaches is the most a server of its I/O engine can serve on this machine for
// that load; scripts/bench/store.sh measures it beside ours and PyTorch's.
//   store_floor_server [--io io_uring|epoll] [--value-bytes 64] [--dialect legacy|v2]
// prints the port, serves.
#include "floor_server.hpp"

#include <netinet/in.h>
#include <sys/socket.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>

#include "common/error.hpp"
#include "rendezvous/store/wire_codec.hpp"

namespace {

int listen_loopback() {
  // Non-blocking: the epoll engine drains the accept queue until EAGAIN.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(fd, SOMAXCONN) != 0) {
    std::fprintf(stderr, "store_floor_server: listen: %s\n", ddp::errno_text(errno).c_str());
    std::exit(1);
  }
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  std::printf("%d\n", ntohs(address.sin_port));
  std::fflush(stdout);
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  size_t value_bytes = 64;
  std::string io = "io_uring";
  std::string dialect = "legacy";
  CLI::App app{"store_floor_server: canned replies to store_bench's load (a floor)"};
  app.add_option("--value-bytes", value_bytes, "size of the value a GET returns")
      ->capture_default_str();
  app.add_option("--io", io, "I/O engine")
      ->check(CLI::IsMember({"io_uring", "epoll"}))
      ->capture_default_str();
  app.add_option("--dialect", dialect, "store_bench's --dialect: legacy or v2")
      ->check(CLI::IsMember({"legacy", "v2"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  namespace wire = ddp::rendezvous::wire;
  ddp::bench::FloorReplies replies;
  wire::put_string(replies.get, std::string(value_bytes, 'x'));
  wire::put_i64(replies.add, 1);  // the count is not checked by the load
  replies.set_byte = static_cast<char>(wire::command_byte(
      wire::Command::kSet, dialect == "v2" ? wire::Dialect::kV2 : wire::Dialect::kLegacy));
  const int listener = listen_loopback();
  try {
    if (io == "io_uring") ddp::bench::serve_floor_uring(listener, replies);
    ddp::bench::serve_floor_epoll(listener, replies);
  } catch (const ddp::Error& e) {
    std::fprintf(stderr, "store_floor_server: %s\n", e.what());
    return 1;
  }
}
