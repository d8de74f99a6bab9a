#include "common/socket_io.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "common/host_address.hpp"

namespace ddp {
namespace {

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

void set_no_delay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // small frames go at once
}

// One non-blocking connect attempt bounded by deadline; the socket, or none with err set.
Fd try_connect(const addrinfo* ai, const Deadline& deadline, int& err) {
  Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
  if (!fd) {
    err = errno;
    return fd;
  }
  if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      err = errno;
      return Fd();
    }
    pollfd p{fd.get(), POLLOUT, 0};
    const int rc = ::poll(&p, 1, deadline.poll_timeout_ms());
    if (rc <= 0) {
      err = rc == 0 ? ETIMEDOUT : errno;
      return Fd();
    }
    int so_error = 0;
    socklen_t len = sizeof(so_error);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so_error, &len);
    if (so_error != 0) {
      err = so_error;
      return Fd();
    }
  }
  set_no_delay(fd.get());
  return fd;
}

}  // namespace

bool poll_until(int fd, short events, const Deadline& deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, deadline.poll_timeout_ms());
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) throw SocketError("poll failed: " + errno_text(errno));
  }
}

SocketConn::SocketConn(Fd fd) : fd_(std::move(fd)) {
  if (!fd_) return;
  ::fcntl(fd_.get(), F_SETFL, ::fcntl(fd_.get(), F_GETFL) | O_NONBLOCK);
  set_no_delay(fd_.get());
}

void SocketConn::shutdown() {
  if (fd_) ::shutdown(fd_.get(), SHUT_RDWR);
}

SocketConn SocketConn::connect(const std::string& given_host, uint16_t port,
                               std::chrono::milliseconds connect_timeout, std::string_view peer,
                               bool give_up_when_refused) {
  const std::string host = normalize_host(given_host);  // "[::1]" -> "::1" for getaddrinfo
  const std::string endpoint = join_host_port(host, port);
  const Deadline deadline = Deadline::after(connect_timeout);
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
    const int gai = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
    if (gai != 0) {
      // Name resolution can fail transiently (DNS not up yet on a fresh node): retry too.
      last_err = 0;
      tried = {std::string("resolve '") + host + "': " + gai_strerror(gai)};
    } else {
      tried.clear();
      // Addresses of a family this machine lacks (IPv6 on a kernel without it) never
      // become reachable by waiting.
      bool family_missing = true;
      bool all_refused = true;
      for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
        int err = 0;
        Fd fd = try_connect(ai, deadline, err);
        if (fd) {
          ::freeaddrinfo(res);
          SocketConn conn;
          conn.fd_ = std::move(fd);
          return conn;
        }
        last_err = err;
        family_missing = family_missing && err == EAFNOSUPPORT;
        all_refused = all_refused && err == ECONNREFUSED;
        tried.push_back(address_text(ai->ai_addr));
      }
      ::freeaddrinfo(res);
      if (family_missing || (give_up_when_refused && all_refused)) break;
    }
    if (deadline.expired()) break;
    // remaining() rounds down: under 1 ms left it is 0, and the loop would spin (dozens of
    // attempts in that last millisecond); poll_timeout_ms() rounds up.
    std::this_thread::sleep_for(
        deadline.is_never()
            ? backoff
            : std::min(backoff, std::chrono::milliseconds(deadline.poll_timeout_ms())));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  std::string addrs;
  for (const auto& t : tried) addrs += (addrs.empty() ? "" : ", ") + t;
  // Refused by every address: its host answers and nothing listens. Out of time, or
  // unreachable: nothing answered (an attempt the deadline cut short reads ETIMEDOUT).
  throw SocketError("cannot connect to " + std::string(peer) + " at tcp://" + endpoint +
                        " within " + std::to_string(connect_timeout.count()) + " ms (" +
                        std::to_string(attempts) + " attempts; tried " + addrs +
                        "): " + (last_err != 0 ? errno_text(last_err) : std::string("no address")),
                    peer_loss_of_errno(last_err));
}

bool SocketConn::readable_now() const {
  if (!fd_) return false;
  pollfd p{fd_.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

void SocketConn::send_all(std::string_view data, const Deadline& deadline) {
  if (!fd_) throw SocketError("not connected");
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd_.get(), data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!poll_until(fd_.get(), POLLOUT, deadline)) throw SocketTimeout("send timed out");
      continue;
    }
    throw SocketError("send failed: " + errno_text(errno), peer_loss_of_errno(errno));
  }
}

std::string SocketConn::recv_exact(size_t n, const Deadline& deadline) {
  if (!fd_) throw SocketError("not connected");
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::recv(fd_.get(), out.data() + got, n - got, 0);
    if (r > 0) {
      got += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) throw SocketError("connection closed by the peer", PeerLoss::kDeath);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!poll_until(fd_.get(), POLLIN, deadline)) throw SocketTimeout("no reply in time");
      continue;
    }
    throw SocketError("receive failed: " + errno_text(errno), peer_loss_of_errno(errno));
  }
  return out;
}

std::string SocketConn::recv_string(const Deadline& deadline, size_t max_bytes) {
  const std::string len_bytes = recv_exact(8, deadline);
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) {
    len = (len << 8) | static_cast<uint8_t>(len_bytes[static_cast<size_t>(i)]);
  }
  if (len > max_bytes) {
    throw ProtocolError("reply string of " + std::to_string(len) + " bytes exceeds " +
                        std::to_string(max_bytes));
  }
  return recv_exact(static_cast<size_t>(len), deadline);
}

}  // namespace ddp
