#include "store_load.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/ip/address.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <thread>

#include "common/error.hpp"

// The load generator is deliberately thin: raw non-blocking sockets on one level-triggered
// epoll set, one send and one recv per round trip. It shares the 2 cores with the server it
// measures, so every microsecond it spends is a microsecond the server does not get; an
// Asio client costs an extra (failing) speculative recv per round trip.

namespace ddp::bench {

using Clock = std::chrono::steady_clock;
namespace wire = rendezvous::wire;

double LoadResult::percentile_us(double p) const {
  if (round_trip_us.empty()) return 0;
  std::vector<double> v = round_trip_us;
  const auto idx = static_cast<size_t>(std::lround(p / 100.0 * static_cast<double>(v.size() - 1)));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(idx), v.end());
  return v[idx];
}

namespace {

// No reply for this long means the server is stuck: fail instead of hanging the benchmark.
constexpr int kStallMs = 30'000;

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  [[nodiscard]] int get() const { return fd_; }

 private:
  int fd_;
};

struct Frames {
  std::string handshake;  // v2 only: VALIDATE, no reply
  std::string set_get;    // SET k v + GET k: one reply (the value)
  std::string add;        // ADD counter 1: one reply (the new count)
};

Frames make_frames(const LoadOptions& o, int id) {
  const std::string key = "bench/" + std::to_string(id);
  wire::Request set;
  set.command = wire::Command::kSet;
  set.keys = {key};
  set.values = {std::string(o.value_bytes, 'x')};
  wire::Request get;
  get.command = wire::Command::kGet;
  get.keys = {key};
  wire::Request add;
  add.command = wire::Command::kAdd;
  add.keys = {"bench/counter"};
  add.delta = 1;
  Frames f;
  // SET has no reply, so it travels with a GET of the same key; that GET's reply ends the
  // round trip and checks the value.
  f.set_get = wire::encode_request(set, o.dialect) + wire::encode_request(get, o.dialect);
  f.add = wire::encode_request(add, o.dialect);
  if (o.dialect == wire::Dialect::kV2) {
    wire::Request hello;
    hello.command = wire::Command::kValidate;
    hello.nonce = wire::kValidationMagic;
    f.handshake = wire::encode_request(hello, o.dialect);
  }
  return f;
}

double cpu_seconds_now() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

[[noreturn]] void fail(int id, const std::string& what) {
  throw StoreError("store_bench: client " + std::to_string(id) + ": " + what);
}

sockaddr_storage resolve(const LoadOptions& o, socklen_t& len) {
  const auto address = boost::asio::ip::make_address(o.host);  // throws on a bad address
  sockaddr_storage ss{};
  if (address.is_v4()) {
    auto* sa = reinterpret_cast<sockaddr_in*>(&ss);
    sa->sin_family = AF_INET;
    sa->sin_port = htons(o.port);
    const auto bytes = address.to_v4().to_bytes();
    std::copy(bytes.begin(), bytes.end(), reinterpret_cast<unsigned char*>(&sa->sin_addr));
    len = sizeof(sockaddr_in);
  } else {
    auto* sa = reinterpret_cast<sockaddr_in6*>(&ss);
    sa->sin6_family = AF_INET6;
    sa->sin6_port = htons(o.port);
    const auto bytes = address.to_v6().to_bytes();
    std::copy(bytes.begin(), bytes.end(), sa->sin6_addr.s6_addr);
    len = sizeof(sockaddr_in6);
  }
  return ss;
}

// Blocking connect, retried while the listen backlog overflows (1024 clients at once).
Fd connect_one(const sockaddr_storage& ss, socklen_t len, int id, Clock::time_point deadline) {
  for (;;) {
    Fd fd(::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) fail(id, "socket: " + errno_text(errno));
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&ss), len) == 0) {
      int one = 1;
      ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return fd;
    }
    const int err = errno;
    if (Clock::now() > deadline) fail(id, "connect: " + errno_text(err));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void send_all(int fd, std::string_view bytes, int id) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(id, "send: " + errno_text(errno));
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

struct Client {
  Fd fd;
  Frames frames;
  std::vector<char> in;
  size_t expected = 0;  // bytes of the reply to the request in flight
  size_t have = 0;
  bool set_get = false;
  int done = 0;  // requests sent
  uint64_t round = 0;
  Clock::time_point started;
  std::vector<double> samples;
};

// One untimed blocking round trip (handshake + ADD), so the clock starts only once the
// server has accepted every connection.
void warm_up(Client& c, const LoadOptions& o, int id) {
  wire::Request add;
  add.command = wire::Command::kAdd;
  add.keys = {"bench/warmup"};
  add.delta = 1;
  send_all(c.fd.get(), c.frames.handshake + wire::encode_request(add, o.dialect), id);
  char reply[8];
  size_t got = 0;
  while (got < sizeof(reply)) {
    const ssize_t n = ::recv(c.fd.get(), reply + got, sizeof(reply) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(id, n == 0 ? "server closed the connection" : "recv: " + errno_text(errno));
    got += static_cast<size_t>(n);
  }
}

}  // namespace

LoadResult run_load(const LoadOptions& options) {
  socklen_t len = 0;
  const sockaddr_storage ss = resolve(options, len);
  const auto connect_deadline = Clock::now() + std::chrono::seconds(30);
  const size_t n = static_cast<size_t>(options.clients);
  Fd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (epoll.get() < 0) throw StoreError("store_bench: epoll_create1: " + errno_text(errno));

  std::vector<Client> clients(n);
  for (size_t i = 0; i < n; ++i) {
    const int id = static_cast<int>(i);
    Client& c = clients[i];
    c.fd = connect_one(ss, len, id, connect_deadline);
    c.frames = make_frames(options, id);
    c.in.resize(8 + options.value_bytes);
    c.samples.reserve(static_cast<size_t>(options.requests_per_client) / 3 * 2 + 2);
    warm_up(c, options, id);
    epoll_event ev{};
    ev.events = EPOLLIN;  // level-triggered: one recv per readiness, never a failing one
    ev.data.u64 = i;
    if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, c.fd.get(), &ev) != 0) {
      fail(id, "epoll_ctl: " + errno_text(errno));
    }
  }

  LoadResult result;
  size_t finished = 0;
  auto next = [&](Client& c, int id) {
    if (c.done >= options.requests_per_client) {
      ++finished;
      return;
    }
    c.set_get = (c.round++ % 2) == 0;
    c.expected = c.set_get ? 8 + options.value_bytes : 8;
    c.have = 0;
    c.done += c.set_get ? 2 : 1;
    result.requests += c.set_get ? 2 : 1;
    c.started = Clock::now();
    send_all(c.fd.get(), c.set_get ? c.frames.set_get : c.frames.add, id);
  };

  const auto start = Clock::now();
  const double cpu_start = cpu_seconds_now();
  for (size_t i = 0; i < n; ++i) next(clients[i], static_cast<int>(i));
  std::vector<epoll_event> events(std::min<size_t>(n, 1024));
  while (finished < n) {
    const int ready =
        ::epoll_wait(epoll.get(), events.data(), static_cast<int>(events.size()), kStallMs);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) throw StoreError("store_bench: epoll_wait: " + errno_text(errno));
    if (ready == 0) {
      throw StoreError("store_bench: no reply from the server within " +
                       std::to_string(kStallMs / 1000) + " s");
    }
    for (int k = 0; k < ready; ++k) {
      const size_t i = events[static_cast<size_t>(k)].data.u64;
      const int id = static_cast<int>(i);
      Client& c = clients[i];
      if (c.expected == 0) fail(id, "the server sent bytes nobody asked for");
      const ssize_t got = ::recv(c.fd.get(), c.in.data() + c.have, c.expected - c.have, 0);
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (got <= 0)
        fail(id, got == 0 ? "server closed the connection" : "recv: " + errno_text(errno));
      c.have += static_cast<size_t>(got);
      if (c.have < c.expected) continue;
      if (c.set_get && wire::get_u64(c.in.data()) != options.value_bytes) {
        fail(id, "GET returned " + std::to_string(wire::get_u64(c.in.data())) +
                     " bytes, expected " + std::to_string(options.value_bytes));
      }
      c.expected = 0;
      c.samples.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - c.started).count());
      next(c, id);
    }
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.cpu_seconds = cpu_seconds_now() - cpu_start;
  for (auto& c : clients) {
    result.round_trip_us.insert(result.round_trip_us.end(), c.samples.begin(), c.samples.end());
  }
  return result;
}

}  // namespace ddp::bench
