#include "init_load.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>

#include "bench/common/process_cpu.hpp"
#include "common/error.hpp"

namespace ddp::bench {
namespace {

using Clock = std::chrono::steady_clock;

sockaddr_in ipv4(const std::string& host, uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) {
    throw StoreError("init_bench: '" + host + "' is not an IPv4 address");
  }
  return address;
}

const char* phase_name(InitPhase phase) {
  switch (phase) {
    case InitPhase::kConnect:
      return "connect";
    case InitPhase::kInit:
      return "init";
    case InitPhase::kExchange:
      return "exchange";
    case InitPhase::kBarrier:
      return "barrier";
    case InitPhase::kDone:
      return "done";
  }
  return "?";
}

class InitLoad {
 public:
  explicit InitLoad(const InitLoadOptions& options);
  ~InitLoad();
  InitLoad(const InitLoad&) = delete;
  InitLoad& operator=(const InitLoad&) = delete;

  InitLoadResult run();

 private:
  struct Rank {
    int fd = -1;
    bool connected = false;
    RankScript script;
  };

  void connect_next();
  void on_event(size_t i, uint32_t events);
  void on_readable(size_t i);
  void send(size_t i, const std::string& bytes);
  // Records the end of every phase rank i went through since `before`.
  void passed(size_t i, InitPhase before);
  [[nodiscard]] float now() const {
    return std::chrono::duration<float>(Clock::now() - start_).count();
  }
  [[nodiscard]] int epoll_timeout_ms() const;
  [[noreturn]] void fail(size_t i, const std::string& what) const;
  // "19000 ranks: 12 in connect, 300 in init, ..." for a stall.
  [[nodiscard]] std::string progress() const;

  InitLoadOptions options_;
  sockaddr_in server_{};
  bool spread_sources_ = false;
  int epoll_ = -1;
  std::vector<Rank> ranks_;
  std::vector<RankTimes> times_;
  size_t next_ = 0;        // the next rank to connect
  size_t connecting_ = 0;  // connect issued, PING not answered yet
  size_t done_ = 0;
  bool polling_ = false;  // rank 0 sleeps until poll_at_
  Clock::time_point poll_at_;
  Clock::time_point start_;
};

InitLoad::InitLoad(const InitLoadOptions& options)
    : options_(options), server_(ipv4(options.host, options.port)) {
  spread_sources_ = options.sources > 1 && options.host.starts_with("127.");
  epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_ < 0) throw StoreError("init_bench: epoll_create1: " + errno_text(errno));
  const int n = options.pattern.ranks;
  ranks_.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) ranks_.push_back(Rank{-1, false, RankScript(r, options_.pattern)});
  times_.resize(ranks_.size());
}

InitLoad::~InitLoad() {
  for (const Rank& rank : ranks_) {
    if (rank.fd >= 0) ::close(rank.fd);
  }
  ::close(epoll_);
}

InitLoadResult InitLoad::run() {
  const double cpu_start = process_cpu_seconds();
  const double server_start =
      options_.server_pid > 0 ? process_cpu_seconds(options_.server_pid) : -1;
  start_ = Clock::now();
  while (connecting_ < static_cast<size_t>(options_.window) && next_ < ranks_.size()) {
    connect_next();
  }
  std::array<epoll_event, 1024> events{};
  auto last_progress = Clock::now();
  while (done_ < ranks_.size()) {
    const int ready =
        ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), epoll_timeout_ms());
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) throw StoreError("init_bench: epoll_wait: " + errno_text(errno));
    const auto now = Clock::now();
    if (ready > 0) last_progress = now;
    for (int k = 0; k < ready; ++k) {
      on_event(events[static_cast<size_t>(k)].data.u64, events[static_cast<size_t>(k)].events);
    }
    if (polling_ && now >= poll_at_) {
      polling_ = false;
      last_progress = now;
      send(0, ranks_[0].script.resume());
    }
    while (connecting_ < static_cast<size_t>(options_.window) && next_ < ranks_.size()) {
      connect_next();
    }
    if (now - last_progress > std::chrono::seconds(options_.stall_seconds)) {
      throw StoreError("init_bench: no reply for " + std::to_string(options_.stall_seconds) +
                       " s; " + progress());
    }
  }
  InitLoadResult result;
  result.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  result.cpu_seconds = process_cpu_seconds() - cpu_start;
  if (server_start >= 0) {
    result.server_cpu_seconds = process_cpu_seconds(options_.server_pid) - server_start;
  }
  result.ranks = std::move(times_);
  return result;
}

void InitLoad::connect_next() {
  const size_t i = next_++;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) fail(i, "socket: " + errno_text(errno) + " (ulimit -n?)");
  ranks_[i].fd = fd;
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (spread_sources_) {
    // The port is chosen at connect(), per (source, destination): each source address
    // brings its own ephemeral range.
    ::setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    sockaddr_in source{};
    source.sin_family = AF_INET;
    source.sin_addr.s_addr = htonl(0x7F000001U + static_cast<uint32_t>(i % options_.sources));
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&source), sizeof(source)) != 0) {
      fail(i, "bind to a source address: " + errno_text(errno));
    }
  }
  times_[i].connect_started = now();
  ++connecting_;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&server_), sizeof(server_)) != 0 &&
      errno != EINPROGRESS) {
    fail(i, "connect: " + errno_text(errno));
  }
  // Edge-triggered: EPOLLOUT reports the connection once; a read shorter than the buffer
  // leaves the socket empty, so every later reply is a new edge.
  epoll_event event{};
  event.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  event.data.u64 = i;
  if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &event) != 0) {
    fail(i, "epoll_ctl: " + errno_text(errno));
  }
}

void InitLoad::on_event(size_t i, uint32_t events) {
  Rank& rank = ranks_[i];
  if (!rank.connected) {
    if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) return;
    int error = 0;
    socklen_t length = sizeof(error);
    ::getsockopt(rank.fd, SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) fail(i, "connect: " + errno_text(error));
    rank.connected = true;
    send(i, rank.script.start());
  }
  if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) on_readable(i);
}

void InitLoad::on_readable(size_t i) {
  Rank& rank = ranks_[i];
  std::array<char, 4096> buffer{};
  for (;;) {
    const ssize_t got = ::recv(rank.fd, buffer.data(), buffer.size(), 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && errno == EAGAIN) return;
    if (got == 0) fail(i, "the server closed the connection");
    if (got < 0) fail(i, "recv: " + errno_text(errno));
    const InitPhase before = rank.script.phase();
    const ScriptStep step = rank.script.received({buffer.data(), static_cast<size_t>(got)});
    passed(i, before);
    if (!step.send.empty()) send(i, step.send);
    if (step.poll_later) {
      polling_ = true;
      poll_at_ = Clock::now() + options_.pattern.poll_interval;
    }
    if (static_cast<size_t>(got) < buffer.size()) return;  // drained: the next reply is an edge
  }
}

void InitLoad::send(size_t i, const std::string& bytes) {
  // One request in flight per connection and a few hundred bytes each: the socket's send
  // buffer is empty whenever a rank sends, so a short write would be a broken connection.
  for (;;) {
    const ssize_t sent = ::send(ranks_[i].fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent == static_cast<ssize_t>(bytes.size())) return;
    fail(i, sent < 0 ? "send: " + errno_text(errno) : "short send");
  }
}

void InitLoad::passed(size_t i, InitPhase before) {
  const InitPhase after = ranks_[i].script.phase();
  if (after == before) return;
  const float t = now();
  RankTimes& times = times_[i];
  for (auto p = static_cast<int>(before); p < static_cast<int>(after); ++p) {
    switch (static_cast<InitPhase>(p)) {
      case InitPhase::kConnect:
        times.connected = t;
        --connecting_;
        break;
      case InitPhase::kInit:
        times.initialized = t;
        break;
      case InitPhase::kExchange:
        times.exchanged = t;
        break;
      case InitPhase::kBarrier:
        times.done = t;
        ++done_;
        break;
      case InitPhase::kDone:
        break;
    }
  }
}

int InitLoad::epoll_timeout_ms() const {
  if (!polling_) return 1000;  // wakes to check for a stall
  const auto left = std::chrono::duration<double, std::milli>(poll_at_ - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::ceil(left));
}

void InitLoad::fail(size_t i, const std::string& what) const {
  throw StoreError("init_bench: rank " + std::to_string(i) + " (" +
                   phase_name(ranks_[i].script.phase()) + "): " + what + "; " + progress());
}

std::string InitLoad::progress() const {
  std::array<size_t, 5> in{};
  for (const Rank& rank : ranks_) ++in[static_cast<size_t>(rank.script.phase())];
  in[0] -= ranks_.size() - next_;  // not started yet
  std::string text = std::to_string(ranks_.size()) +
                     " ranks: " + std::to_string(ranks_.size() - next_) + " not started";
  for (size_t p = 0; p < in.size(); ++p) {
    text += ", " + std::to_string(in[p]) + " " +
            (p + 1 == in.size() ? "done" : std::string("in ") + phase_name(InitPhase(p)));
  }
  return text;
}

}  // namespace

InitLoadResult run_init_load(const InitLoadOptions& options) {
  if (options.pattern.ranks < 1) throw StoreError("init_bench: --ranks must be at least 1");
  return InitLoad(options).run();
}

}  // namespace ddp::bench
