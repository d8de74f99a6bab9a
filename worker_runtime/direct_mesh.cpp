#include "worker_runtime/direct_mesh.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "common/error.hpp"

namespace ddp::worker_runtime {
namespace {

using Clock = std::chrono::steady_clock;

struct FrameHeader {
  uint64_t seq;
  uint64_t bytes;
};

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1000));  // re-check each second
}

void set_socket_options(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // small frames go at once
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
}

// Waits until fd is ready for events or the deadline passes (false).
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  while (Clock::now() < deadline) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc > 0) {
      return true;
    }
    if (rc < 0 && errno != EINTR) {
      return false;
    }
  }
  return false;
}

// Blocking-with-deadline full read/write used only while the mesh is being built.
void io_all(int fd, void* data, size_t len, bool write, Clock::time_point deadline,
            const std::string& what) {
  auto* p = static_cast<char*>(data);
  while (len > 0) {
    const ssize_t n = write ? ::send(fd, p, len, MSG_NOSIGNAL) : ::recv(fd, p, len, 0);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_fd(fd, write ? POLLOUT : POLLIN, deadline)) {
        throw CollectiveError(what + ": timed out");
      }
    } else {
      throw CollectiveError(what + ": " + (n == 0 ? "connection closed" : errno_text(errno)));
    }
  }
}

// Non-blocking connect finished within the deadline, or CollectiveError naming `what`.
void connect_before(int fd, const addrinfo* ai, Clock::time_point deadline,
                    const std::string& what) {
  if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
    return;
  }
  if (errno != EINPROGRESS) {
    throw CollectiveError(what + " failed: " + errno_text(errno));
  }
  if (!wait_fd(fd, POLLOUT, deadline)) {
    throw CollectiveError(what + " timed out");
  }
  int err = 0;
  socklen_t len = sizeof(err);
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    throw CollectiveError(what + " failed: " + errno_text(err));
  }
}

std::string sockaddr_text(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = {};
  uint16_t port = 0;
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
  } else {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
  }
  return std::string(host) + " " + std::to_string(port);
}

// One peer's progress through an exchange().
struct Transfer {
  int peer = 0;
  int fd = -1;
  FrameHeader out_header{};
  size_t sent = 0;  // of header + payload
  FrameHeader in_header{};
  size_t received = 0;  // of header + payload
  std::span<std::byte> in;
  [[nodiscard]] bool send_done(size_t payload) const {
    return sent == sizeof(FrameHeader) + payload;
  }
  [[nodiscard]] bool recv_done() const { return received == sizeof(FrameHeader) + in.size(); }
};

}  // namespace

DirectMesh::DirectMesh(rendezvous::Store& store, const DirectMeshOptions& options)
    : rank_(options.rank), size_(options.size), fds_(static_cast<size_t>(options.size), -1) {
  const auto deadline = Clock::now() + options.connect_timeout;
  const std::string me = "direct mesh rank " + std::to_string(rank_) + "/" + std::to_string(size_);
  // Listen on the routed address, port chosen by the kernel.
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  addrinfo* bound = nullptr;
  if (const int rc = ::getaddrinfo(options.bind_addr.c_str(), "0", &hints, &bound); rc != 0) {
    throw CollectiveError(me + ": bad bind address '" + options.bind_addr +
                          "': " + ::gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> bound_guard(bound, &::freeaddrinfo);
  const int listener = ::socket(bound->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0 || ::bind(listener, bound->ai_addr, bound->ai_addrlen) != 0 ||
      ::listen(listener, size_) != 0) {
    const int err = errno;
    if (listener >= 0) {
      ::close(listener);
    }
    throw CollectiveError(me + ": cannot listen on " + options.bind_addr + ": " + errno_text(err));
  }
  try {
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    ::getsockname(listener, reinterpret_cast<sockaddr*>(&local), &len);
    store.set(options.key_prefix + "/" + std::to_string(rank_), sockaddr_text(local));

    // Connect to every lower rank and say who we are.
    for (int peer = 0; peer < rank_; ++peer) {
      const std::string key = options.key_prefix + "/" + std::to_string(peer);
      store.wait({key}, options.connect_timeout);
      std::istringstream addr(store.get(key));
      std::string host, port;
      addr >> host >> port;
      addrinfo* peer_ai = nullptr;
      hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
      if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &peer_ai) != 0) {
        throw CollectiveError(me + ": rank " + std::to_string(peer) + " published a bad address '" +
                              host + " " + port + "'");
      }
      std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> peer_guard(peer_ai, &::freeaddrinfo);
      const int fd = ::socket(peer_ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      fds_[static_cast<size_t>(peer)] = fd;
      if (fd < 0) {
        throw CollectiveError(me + ": socket failed: " + errno_text(errno));
      }
      set_socket_options(fd);  // non-blocking: the connect below is bounded by the deadline
      connect_before(fd, peer_ai, deadline,
                     me + ": connect to rank " + std::to_string(peer) + " at " +
                         (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                         port);
      int32_t id = rank_;
      io_all(fd, &id, sizeof(id), true, deadline, me + ": hello to rank " + std::to_string(peer));
    }
    // Accept every higher rank; the hello says which one it is.
    set_socket_options(listener);
    for (int accepted = rank_ + 1; accepted < size_; ++accepted) {
      if (!wait_fd(listener, POLLIN, deadline)) {
        throw CollectiveError(me + ": timed out waiting for higher ranks to connect (" +
                              std::to_string(accepted - rank_ - 1) + "/" +
                              std::to_string(size_ - rank_ - 1) + " connected)");
      }
      const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EAGAIN || errno == EINTR) {
          --accepted;
          continue;
        }
        throw CollectiveError(me + ": accept failed: " + errno_text(errno));
      }
      set_socket_options(fd);
      int32_t id = -1;
      try {
        io_all(fd, &id, sizeof(id), false, deadline, me + ": hello from a peer");
      } catch (...) {
        ::close(fd);
        throw;
      }
      if (id <= rank_ || id >= size_ || fds_[static_cast<size_t>(id)] != -1) {
        ::close(fd);
        throw CollectiveError(me + ": unexpected hello from rank " + std::to_string(id));
      }
      fds_[static_cast<size_t>(id)] = fd;
    }
  } catch (...) {
    ::close(listener);
    for (int fd : fds_) {
      if (fd >= 0) {
        ::close(fd);
      }
    }
    throw;
  }
  ::close(listener);
}

DirectMesh::~DirectMesh() {
  for (int fd : fds_) {
    if (fd >= 0) {
      ::close(fd);
    }
  }
}

void DirectMesh::exchange(std::span<const std::byte> send,
                          const std::vector<std::span<std::byte>>& recv, Duration timeout,
                          const std::string& what) {
  const uint64_t seq = ++seq_;
  const auto deadline = Clock::now() + timeout;
  std::vector<Transfer> peers;
  peers.reserve(static_cast<size_t>(size_ - 1));
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) {
      Transfer t;
      t.peer = r;
      t.fd = fds_[static_cast<size_t>(r)];
      t.out_header = {seq, send.size()};
      t.in = recv[static_cast<size_t>(r)];
      peers.push_back(t);
    }
  }
  auto fail = [&](const Transfer& t, const std::string& why) {
    return CollectiveError(what + " on rank " + std::to_string(rank_) + "/" +
                           std::to_string(size_) + ", peer rank " + std::to_string(t.peer) +
                           " (timeout " + std::to_string(timeout.count()) + " ms): " + why);
  };
  std::vector<pollfd> polls(peers.size());
  for (;;) {
    bool all_done = true;
    for (size_t i = 0; i < peers.size(); ++i) {
      Transfer& t = peers[i];
      // Send as much as the socket takes: header and payload in one writev.
      while (!t.send_done(send.size())) {
        std::array<iovec, 2> iov{};
        int n_iov = 0;
        if (t.sent < sizeof(FrameHeader)) {
          iov[n_iov++] = {reinterpret_cast<char*>(&t.out_header) + t.sent,
                          sizeof(FrameHeader) - t.sent};
          iov[n_iov++] = {const_cast<std::byte*>(send.data()), send.size()};
        } else {
          const size_t off = t.sent - sizeof(FrameHeader);
          iov[n_iov++] = {const_cast<std::byte*>(send.data()) + off, send.size() - off};
        }
        msghdr msg{};
        msg.msg_iov = iov.data();
        msg.msg_iovlen = static_cast<size_t>(n_iov);
        const ssize_t n = ::sendmsg(t.fd, &msg, MSG_NOSIGNAL);
        if (n > 0) {
          t.sent += static_cast<size_t>(n);
        } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
          break;
        } else {
          throw fail(t, "send failed: " + errno_text(errno));
        }
      }
      // Receive what has arrived: the header first, then straight into the caller's span.
      while (!t.recv_done()) {
        ssize_t n = 0;
        if (t.received < sizeof(FrameHeader)) {
          n = ::recv(t.fd, reinterpret_cast<char*>(&t.in_header) + t.received,
                     sizeof(FrameHeader) - t.received, 0);
        } else {
          const size_t off = t.received - sizeof(FrameHeader);
          n = ::recv(t.fd, t.in.data() + off, t.in.size() - off, 0);
        }
        if (n > 0) {
          t.received += static_cast<size_t>(n);
          if (t.received == sizeof(FrameHeader) &&
              (t.in_header.seq != seq || t.in_header.bytes != t.in.size())) {
            throw fail(t, "peer sent collective #" + std::to_string(t.in_header.seq) + " of " +
                              std::to_string(t.in_header.bytes) + " bytes, expected #" +
                              std::to_string(seq) + " of " + std::to_string(t.in.size()) +
                              " bytes (ranks issued different collectives?)");
          }
        } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
          break;
        } else {
          throw fail(t, n == 0 ? "peer closed the connection (it exited or failed)"
                               : "recv failed: " + errno_text(errno));
        }
      }
      const bool done = t.send_done(send.size()) && t.recv_done();
      all_done = all_done && done;
      polls[i] = {t.fd,
                  static_cast<short>((t.send_done(send.size()) ? 0 : POLLOUT) |
                                     (t.recv_done() ? 0 : POLLIN)),
                  0};
    }
    if (all_done) {
      return;
    }
    if (Clock::now() >= deadline) {
      for (const auto& t : peers) {
        if (!t.send_done(send.size()) || !t.recv_done()) {
          throw fail(t, "timed out (sent " + std::to_string(t.sent) + ", received " +
                            std::to_string(t.received) + " bytes)");
        }
      }
    }
    const int rc = ::poll(polls.data(), polls.size(), remaining_ms(deadline));
    if (rc < 0 && errno != EINTR) {
      throw CollectiveError(what + ": poll failed: " + errno_text(errno));
    }
  }
}

}  // namespace ddp::worker_runtime
