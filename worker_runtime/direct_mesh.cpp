#include "worker_runtime/direct_mesh.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <sstream>

#include "common/deadline.hpp"
#include "common/error.hpp"
#include "common/fd.hpp"
#include "common/parse_int.hpp"
#include "common/tcp_liveness.hpp"
#include "worker_runtime/reduce_kernels.hpp"

namespace ddp::worker_runtime {
namespace {

struct FrameHeader {
  uint64_t seq;
  uint64_t bytes;
};

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

// True for a numeric IPv4 or IPv6 address: what a peer publishes (getsockname()).
bool is_numeric_address(const std::string& host) {
  in6_addr v6{};
  in_addr v4{};
  return ::inet_pton(AF_INET, host.c_str(), &v4) == 1 ||
         ::inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

// A listening socket on bind_addr, port chosen by the kernel, non-blocking (accepts are
// bounded by poll_until).
Fd listen_on(const std::string& bind_addr, int backlog, const std::string& me) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  addrinfo* bound = nullptr;
  if (const int rc = ::getaddrinfo(bind_addr.c_str(), "0", &hints, &bound); rc != 0) {
    throw CollectiveError(me + ": bad bind address '" + bind_addr + "': " + ::gai_strerror(rc));
  }
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(bound, &::freeaddrinfo);
  Fd listener(::socket(bound->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listener || ::bind(listener.get(), bound->ai_addr, bound->ai_addrlen) != 0 ||
      ::listen(listener.get(), backlog) != 0) {
    throw CollectiveError(me + ": cannot listen on " + bind_addr + ": " + errno_text(errno));
  }
  return listener;
}

// Keepalive, so an idle link to a vanished host fails in about 3 s, but no TCP_USER_TIMEOUT:
// a rank some seconds behind leaves our payload in its closed receive window, which Linux
// would count against that timeout and drop a live peer (docs/store.md, "Dead peers").
TcpLiveness mesh_liveness() {
  TcpLiveness liveness = tcp_liveness_from_env();
  liveness.user_timeout_ms = 0;
  return liveness;
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
    : rank_(options.rank), size_(options.size), peers_(static_cast<size_t>(options.size)) {
  const auto deadline = Deadline::after(options.connect_timeout);
  const std::string me = "direct mesh rank " + std::to_string(rank_) + "/" + std::to_string(size_);
  const TcpLiveness liveness = mesh_liveness();  // a bad DDPLAUNCH_TCP_* fails before listening
  const Fd listener = listen_on(options.bind_addr, size_, me);
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&local), &len);
  store.set(options.key_prefix + "/" + std::to_string(rank_), sockaddr_text(local));

  // Connect to every lower rank and say who we are.
  const int32_t my_id = rank_;
  const std::string_view hello(reinterpret_cast<const char*>(&my_id), sizeof(my_id));
  for (int peer = 0; peer < rank_; ++peer) {
    const std::string key = options.key_prefix + "/" + std::to_string(peer);
    store.wait({key}, options.connect_timeout);
    std::istringstream addr(store.get(key));
    std::string host, port_text;
    addr >> host >> port_text;
    const auto port = try_parse_int(port_text, 1, 65535);
    if (!is_numeric_address(host) || !port) {
      throw CollectiveError(me + ": rank " + std::to_string(peer) + " published a bad address '" +
                            host + " " + port_text + "'");
    }
    const std::string who = "rank " + std::to_string(peer);
    try {
      SocketConn conn =
          SocketConn::connect(host, static_cast<uint16_t>(*port), deadline.remaining(), who);
      set_tcp_liveness(conn.fd(), liveness);
      conn.send_all(hello, deadline);
      peers_[static_cast<size_t>(peer)] = std::move(conn);
    } catch (const SocketError& e) {
      throw CollectiveError(me + ": connect and hello to " + who + ": " + e.what());
    }
  }
  // Accept every higher rank; the hello says which one it is.
  for (int accepted = rank_ + 1; accepted < size_;) {
    if (!poll_until(listener.get(), POLLIN, deadline)) {
      throw CollectiveError(me + ": timed out waiting for higher ranks to connect (" +
                            std::to_string(accepted - rank_ - 1) + "/" +
                            std::to_string(size_ - rank_ - 1) + " connected)");
    }
    Fd fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      throw CollectiveError(me + ": accept failed: " + errno_text(errno));
    }
    SocketConn conn(std::move(fd));
    int32_t id = -1;
    try {
      set_tcp_liveness(conn.fd(), liveness);
      const std::string bytes = conn.recv_exact(sizeof(id), deadline);
      std::memcpy(&id, bytes.data(), sizeof(id));
    } catch (const SocketError& e) {
      throw CollectiveError(me + ": hello from a peer: " + e.what());
    }
    if (id <= rank_ || id >= size_ || peers_[static_cast<size_t>(id)].is_open()) {
      throw CollectiveError(me + ": unexpected hello from rank " + std::to_string(id));
    }
    peers_[static_cast<size_t>(id)] = std::move(conn);
    ++accepted;
  }
}

void DirectMesh::all_reduce(void* data, size_t count, DataType type, ReduceOp op,
                            const CollectiveCall& call) {
  const size_t bytes = count * element_size(type);
  const ReduceFunction fn = reduce_function(type, op);
  slots_.resize(bytes * static_cast<size_t>(size_));
  std::vector<std::span<std::byte>> recv(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    recv[static_cast<size_t>(r)] = {slots_.data() + bytes * static_cast<size_t>(r), bytes};
  }
  auto* own = static_cast<std::byte*>(data);
  exchange({own, bytes}, recv, call.timeout, call.what);
  if (size_ == 2 && (op == ReduceOp::kSum || op == ReduceOp::kAvg)) {
    // a + b == b + a bit for bit: add the peer's payload in place, no copies.
    fn(own, own, recv[static_cast<size_t>(1 - rank_)].data(), count);
    return;
  }
  // Rank order (r0 op r1 op ...) so every rank computes the same bits.
  std::memcpy(recv[static_cast<size_t>(rank_)].data(), own, bytes);
  std::memcpy(own, slots_.data(), bytes);
  for (int r = 1; r < size_; ++r) {
    fn(own, own, recv[static_cast<size_t>(r)].data(), count);
  }
}

void DirectMesh::broadcast(void* data, size_t count, DataType type, int root,
                           const CollectiveCall& call) {
  const size_t bytes = count * element_size(type);
  // Only the root sends; the others send empty frames (which keep the sequence aligned).
  std::vector<std::span<std::byte>> recv(static_cast<size_t>(size_));
  if (rank_ != root) {
    recv[static_cast<size_t>(root)] = {static_cast<std::byte*>(data), bytes};
  }
  const std::span<const std::byte> send =
      rank_ == root ? std::span<const std::byte>(static_cast<const std::byte*>(data), bytes)
                    : std::span<const std::byte>();
  exchange(send, recv, call.timeout, call.what);
}

void DirectMesh::all_gather(const void* send, void* recv, size_t count, DataType type,
                            const CollectiveCall& call) {
  const size_t bytes = count * element_size(type);
  std::vector<std::span<std::byte>> slices(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    slices[static_cast<size_t>(r)] = {
        static_cast<std::byte*>(recv) + bytes * static_cast<size_t>(r), bytes};
  }
  exchange({static_cast<const std::byte*>(send), bytes}, slices, call.timeout, call.what);
  std::memcpy(slices[static_cast<size_t>(rank_)].data(), send, bytes);
}

void DirectMesh::abort() noexcept {
  for (const auto& peer : peers_) {
    if (peer.fd() >= 0) ::shutdown(peer.fd(), SHUT_RDWR);
  }
}

void DirectMesh::barrier(const CollectiveCall& call) {
  exchange({}, std::vector<std::span<std::byte>>(static_cast<size_t>(size_)), call.timeout,
           call.what);
}

void DirectMesh::exchange(std::span<const std::byte> send,
                          const std::vector<std::span<std::byte>>& recv, Duration timeout,
                          const std::string& what) {
  const uint64_t seq = ++seq_;
  const auto deadline = Deadline::after(timeout);
  std::vector<Transfer> peers;
  peers.reserve(static_cast<size_t>(size_ - 1));
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) {
      Transfer t;
      t.peer = r;
      t.fd = peers_[static_cast<size_t>(r)].fd();
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
    if (deadline.expired()) {
      for (const auto& t : peers) {
        if (!t.send_done(send.size()) || !t.recv_done()) {
          throw fail(t, "timed out (sent " + std::to_string(t.sent) + ", received " +
                            std::to_string(t.received) + " bytes)");
        }
      }
    }
    const int rc = ::poll(polls.data(), polls.size(), deadline.poll_timeout_ms());
    if (rc < 0 && errno != EINTR) {
      throw CollectiveError(what + ": poll failed: " + errno_text(errno));
    }
  }
}

}  // namespace ddp::worker_runtime
