#include "tests/support/etcd_cluster.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <thread>

#include "tests/support/wait_until.hpp"

namespace ddp::test {
namespace {

// Timers short enough that a killed leader is replaced within a second or two.
constexpr const char* kHeartbeatMs = "50";
constexpr const char* kElectionMs = "500";

sockaddr_in loopback(uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

// GET path over a fresh HTTP/1.0 connection; "" when the member cannot be reached.
std::string http_get(uint16_t port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  timeval tv{};
  tv.tv_sec = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr = loopback(port);
  std::string reply;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
        static_cast<ssize_t>(request.size())) {
      char buf[4096];
      for (;;) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        reply.append(buf, static_cast<size_t>(n));
      }
    }
  }
  ::close(fd);
  return reply;
}

}  // namespace

uint16_t free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr = loopback(0);
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    ::close(fd);
    throw std::runtime_error(std::string("bind 127.0.0.1:0: ") + std::strerror(err));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string EtcdCluster::binary() {
  const char* env = std::getenv("DDP_ETCD");
  std::string path = env != nullptr && *env != '\0' ? env : "/usr/bin/etcd";
  if (!std::filesystem::exists(path)) {
    throw std::runtime_error("etcd not found at " + path +
                             " (scripts/setup.sh installs Debian's etcd-server)");
  }
  return path;
}

EtcdCluster::EtcdCluster(int members, std::chrono::milliseconds timeout, EtcdTls tls) {
  const bool secure = !tls.cert_file.empty();
  const std::string etcd = binary();
  members_.resize(static_cast<size_t>(members));
  std::string initial_cluster;
  for (int i = 0; i < members; ++i) {
    auto& m = members_[static_cast<size_t>(i)];
    m.name = "m" + std::to_string(i);
    m.client_port = free_loopback_port();
    m.peer_port = free_loopback_port();
    m.health_port = secure ? free_loopback_port() : m.client_port;
    if (!initial_cluster.empty()) initial_cluster += ",";
    initial_cluster += m.name + "=http://127.0.0.1:" + std::to_string(m.peer_port);
  }
  for (auto& m : members_) {
    const std::string client =
        (secure ? "https://127.0.0.1:" : "http://127.0.0.1:") + std::to_string(m.client_port);
    const std::string peer = "http://127.0.0.1:" + std::to_string(m.peer_port);
    ChildOptions options;
    options.argv = {etcd,
                    "--name=" + m.name,
                    "--data-dir=" + dir_.file(m.name),
                    "--listen-client-urls=" + client,
                    "--advertise-client-urls=" + client,
                    "--listen-peer-urls=" + peer,
                    "--initial-advertise-peer-urls=" + peer,
                    "--initial-cluster=" + initial_cluster,
                    "--initial-cluster-state=new",
                    "--initial-cluster-token=ddp-test-" + dir_.path().filename().string(),
                    std::string("--heartbeat-interval=") + kHeartbeatMs,
                    std::string("--election-timeout=") + kElectionMs,
                    "--logger=zap",
                    "--log-level=warn"};
    if (secure) {
      options.argv.push_back("--cert-file=" + tls.cert_file);
      options.argv.push_back("--key-file=" + tls.key_file);
      options.argv.push_back("--listen-metrics-urls=http://127.0.0.1:" +
                             std::to_string(m.health_port));
      if (!tls.client_ca_file.empty()) {
        options.argv.push_back("--client-cert-auth");
        options.argv.push_back("--trusted-ca-file=" + tls.client_ca_file);
      }
    }
    options.merge_stderr = true;
    m.child = std::make_unique<ChildProcess>(options);
  }
  for (int i = 0; i < members; ++i) {
    const bool up = wait_until(
        [&] {
          const auto exited =
              members_[static_cast<size_t>(i)].child->wait_for(std::chrono::milliseconds(0));
          return exited.has_value() || healthy(i);
        },
        timeout);
    if (!up || !healthy(i)) {
      throw std::runtime_error("etcd member " + members_[static_cast<size_t>(i)].name + " at " +
                               endpoint(i) + " not healthy within " +
                               std::to_string(timeout.count()) + " ms; its log:\n" + log(i));
    }
  }
}

EtcdCluster::~EtcdCluster() {
  for (int i = 0; i < size(); ++i) {
    try {
      stop(i, std::chrono::seconds(2));
    } catch (...) {  // NOLINT(bugprone-empty-catch): ChildProcess's destructor kills
    }
  }
}

std::string EtcdCluster::endpoint(int i) const {
  return "127.0.0.1:" + std::to_string(client_port(i));
}

std::vector<std::string> EtcdCluster::endpoints() const {
  std::vector<std::string> out;
  for (int i = 0; i < size(); ++i) out.push_back(endpoint(i));
  return out;
}

uint16_t EtcdCluster::client_port(int i) const {
  return members_.at(static_cast<size_t>(i)).client_port;
}

void EtcdCluster::stop(int i, std::chrono::milliseconds grace) {
  auto& child = members_.at(static_cast<size_t>(i)).child;
  if (!child) return;
  child->signal(SIGTERM);
  child->wait(grace);  // SIGKILLs at the deadline
}

void EtcdCluster::kill(int i) {
  auto& child = members_.at(static_cast<size_t>(i)).child;
  if (!child) return;
  child->signal(SIGKILL);
  child->wait(std::chrono::seconds(5));
}

namespace {

// True when every thread of pid is stopped (state 'T' in /proc/<pid>/task/*/stat).
bool all_threads_stopped(pid_t pid) {
  std::error_code ec;
  const std::filesystem::path tasks = "/proc/" + std::to_string(pid) + "/task";
  bool any = false;
  for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
    std::ifstream stat(task.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto paren = text.rfind(')');
    if (paren == std::string::npos || paren + 2 >= text.size()) continue;
    if (text[paren + 2] != 'T' && text[paren + 2] != 't') return false;
    any = true;
  }
  return any;
}

}  // namespace

void EtcdCluster::signal(int i, int signo) {
  auto& child = members_.at(static_cast<size_t>(i)).child;
  if (!child) return;
  child->signal(signo);
  // kill(2) returns before the member's threads have stopped: one already running could still
  // answer a request sent right after. Wait until every one of them has.
  if (signo == SIGSTOP) {
    const pid_t pid = child->pid();
    wait_until([pid] { return all_threads_stopped(pid); }, std::chrono::seconds(5));
  }
}

bool EtcdCluster::healthy(int i) const {
  const std::string reply = http_get(members_.at(static_cast<size_t>(i)).health_port, "/health");
  return reply.find("\"health\":\"true\"") != std::string::npos;
}

std::string EtcdCluster::log(int i) const {
  const auto& child = members_.at(static_cast<size_t>(i)).child;
  if (!child) return "";
  std::string out = child->out();
  constexpr size_t kTail = 4000;
  if (out.size() > kTail) out = "..." + out.substr(out.size() - kTail);
  return out;
}

}  // namespace ddp::test
