#include "rendezvous/store/socket_io.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "rendezvous/store/host_address.hpp"
#include "rendezvous/store/wire_codec.hpp"

namespace ddp::rendezvous {
namespace {

using Clock = std::chrono::steady_clock;

int remaining_ms(SteadyTime deadline) {
  if (deadline == SteadyTime::max()) return -1;
  // Rounded up: poll() must not return before the deadline.
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return 0;
  return static_cast<int>(std::min<int64_t>(left.count(), 1 << 30));
}

std::string address_text(const sockaddr* sa) {
  char host[NI_MAXHOST] = {};
  char serv[NI_MAXSERV] = {};
  if (getnameinfo(sa, sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in), host,
                  sizeof(host), serv, sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  const std::string text = host;
  return (sa->sa_family == AF_INET6 ? "[" + text + "]" : text) + ":" + serv;
}

// One non-blocking connect attempt bounded by deadline; returns fd or -1 with err set.
int try_connect(const addrinfo* ai, SteadyTime deadline, int& err) {
  int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
  if (fd < 0) {
    err = errno;
    return -1;
  }
  if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      err = errno;
      ::close(fd);
      return -1;
    }
    pollfd p{fd, POLLOUT, 0};
    int rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc <= 0) {
      err = rc == 0 ? ETIMEDOUT : errno;
      ::close(fd);
      return -1;
    }
    int so_error = 0;
    socklen_t len = sizeof(so_error);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
    if (so_error != 0) {
      err = so_error;
      ::close(fd);
      return -1;
    }
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

SteadyTime deadline_after(std::chrono::milliseconds timeout) {
  if (timeout == std::chrono::milliseconds::max()) return SteadyTime::max();
  auto now = Clock::now();
  if (timeout > std::chrono::duration_cast<std::chrono::milliseconds>(SteadyTime::max() - now)) {
    return SteadyTime::max();
  }
  return now + timeout;
}

SocketConn::~SocketConn() {
  close();
}

SocketConn::SocketConn(SocketConn&& other) noexcept : fd_(other.fd_) {
  other.fd_ = -1;
}

SocketConn& SocketConn::operator=(SocketConn&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void SocketConn::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void SocketConn::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

SocketConn SocketConn::connect(const std::string& given_host, uint16_t port,
                               std::chrono::milliseconds connect_timeout) {
  const std::string host = normalize_host(given_host);  // "[::1]" -> "::1" for getaddrinfo
  const std::string endpoint = join_host_port(host, port);
  const SteadyTime deadline = deadline_after(connect_timeout);
  auto backoff = std::chrono::milliseconds(10);
  int attempts = 0;
  int last_err = 0;
  std::vector<std::string> tried;
  for (;;) {
    ++attempts;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const std::string service = std::to_string(port);
    int gai = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
    if (gai != 0) {
      // Name resolution can fail transiently (DNS not up yet on a fresh node): retry too.
      last_err = 0;
      tried = {std::string("resolve '") + host + "': " + gai_strerror(gai)};
    } else {
      tried.clear();
      // Addresses of a family this machine lacks (IPv6 on a kernel without it) never
      // become reachable by waiting.
      bool family_missing = true;
      for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
        int err = 0;
        int fd = try_connect(ai, deadline, err);
        if (fd >= 0) {
          ::freeaddrinfo(res);
          return SocketConn(fd);
        }
        last_err = err;
        family_missing = family_missing && err == EAFNOSUPPORT;
        tried.push_back(address_text(ai->ai_addr));
      }
      ::freeaddrinfo(res);
      if (family_missing) break;
    }
    if (remaining_ms(deadline) == 0) break;
    auto left =
        deadline == SteadyTime::max()
            ? backoff
            : std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    std::this_thread::sleep_for(std::min(backoff, std::max(left, std::chrono::milliseconds(0))));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  std::string addrs;
  for (const auto& t : tried) addrs += (addrs.empty() ? "" : ", ") + t;
  throw StoreError("cannot connect to store at tcp://" + endpoint + " within " +
                   std::to_string(connect_timeout.count()) + " ms (" + std::to_string(attempts) +
                   " attempts; tried " + addrs +
                   "): " + (last_err != 0 ? errno_text(last_err) : std::string("no address")));
}

bool SocketConn::readable_now() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

bool SocketConn::poll_for(short events, SteadyTime deadline) {
  for (;;) {
    pollfd p{fd_, events, 0};
    int rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) throw StoreError("poll failed: " + errno_text(errno));
  }
}

void SocketConn::send_all(std::string_view data, SteadyTime deadline) {
  if (fd_ < 0) throw StoreError("not connected");
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!poll_for(POLLOUT, deadline)) throw StoreTimeout("send timed out");
      continue;
    }
    throw StoreError("send failed: " + errno_text(errno));
  }
}

std::string SocketConn::recv_exact(size_t n, SteadyTime deadline) {
  if (fd_ < 0) throw StoreError("not connected");
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::recv(fd_, out.data() + got, n - got, 0);
    if (r > 0) {
      got += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) throw StoreError("connection closed by the server");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!poll_for(POLLIN, deadline)) throw StoreTimeout("no reply in time");
      continue;
    }
    throw StoreError("receive failed: " + errno_text(errno));
  }
  return out;
}

std::string SocketConn::recv_string(SteadyTime deadline, size_t max_bytes) {
  const std::string len_bytes = recv_exact(8, deadline);
  const uint64_t len = wire::get_u64(len_bytes.data());
  if (len > max_bytes) {
    throw ProtocolError("reply string of " + std::to_string(len) + " bytes exceeds " +
                        std::to_string(max_bytes));
  }
  return recv_exact(static_cast<size_t>(len), deadline);
}

}  // namespace ddp::rendezvous
