#include "tests/support/netns.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "tests/support/process.hpp"

namespace ddp::test {
namespace {

using namespace std::chrono_literals;

const std::string kNetnsDir = "/run/netns";  // where `ip netns add` puts the names
const std::string kPrefix = "ddptest-";      // every cluster's namespaces: ddptest-<pid>-...
constexpr auto kIpTimeout = 10s;

// The `ip` binary (run_process does no PATH search); "" when there is none.
std::string ip_binary() {
  for (const char* dir : {"/usr/sbin", "/sbin", "/usr/bin", "/bin"}) {
    std::string path = std::string(dir) + "/ip";
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

// Runs `ip args...`; "" on success, else the command line, its exit code and its output.
std::string run_ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv{ip_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  const ProcessResult r = run_process(argv, kIpTimeout);
  if (r.exit_code == 0) return "";
  std::string line = "ip";
  for (const auto& a : args) line += " " + a;
  return "'" + line + "' exited " + std::to_string(r.exit_code) + ": " + r.output;
}

void ip_or_throw(const std::vector<std::string>& args) {
  if (auto error = run_ip(args); !error.empty()) throw NetnsUnavailable(error);
}

// Deletes namespaces of earlier runs whose process is gone (a crashed or killed test).
void remove_leftovers() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(kNetnsDir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0) continue;
    const pid_t owner = std::atoi(name.c_str() + kPrefix.size());
    if (owner <= 0 || owner == ::getpid()) continue;
    if (::kill(owner, 0) == 0 || errno != ESRCH) continue;  // still running (or not ours)
    run_ip({"netns", "delete", name});                      // best effort
  }
}

}  // namespace

NetnsScope::NetnsScope(int netns_fd)
    : previous_fd_(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)) {
  if (previous_fd_ < 0) {
    throw std::runtime_error(std::string("open /proc/thread-self/ns/net: ") + std::strerror(errno));
  }
  if (::setns(netns_fd, CLONE_NEWNET) != 0) {
    const int err = errno;
    ::close(previous_fd_);
    throw std::runtime_error(std::string("setns into a test host failed: ") + std::strerror(err));
  }
}

NetnsScope::~NetnsScope() {
  // A thread left in a test host would quietly run the rest of the suite there: stop instead.
  if (::setns(previous_fd_, CLONE_NEWNET) != 0) {
    std::fprintf(stderr, "NetnsScope: cannot return to the original network namespace: %s\n",
                 std::strerror(errno));
    std::abort();
  }
  ::close(previous_fd_);
}

NetnsCluster::NetnsCluster(std::size_t hosts) {
  static std::atomic<int> counter{0};
  const pid_t pid = ::getpid();
  prefix_ = kPrefix + std::to_string(pid) + "-" + std::to_string(counter++) + "-";
  if (hosts == 0 || hosts > 250) throw std::invalid_argument("NetnsCluster: 1..250 hosts");
  if (::geteuid() != 0) throw NetnsUnavailable("network namespaces need root (euid is not 0)");
  if (ip_binary().empty())
    throw NetnsUnavailable("no `ip` (iproute2) in /usr/sbin, /sbin, /usr/bin or /bin");
  remove_leftovers();
  // 10.X.Y.0/24 from the pid: unique among concurrent runs as long as pids differ in their
  // low 16 bits (the networks are isolated anyway; this keeps logs of parallel runs apart).
  const std::string net =
      "10." + std::to_string((pid >> 8) & 0xff) + "." + std::to_string(pid & 0xff) + ".";
  try {
    switch_ns_ = prefix_ + "sw";
    ip_or_throw({"netns", "add", switch_ns_});
    created_.push_back(switch_ns_);
    ip_or_throw({"-n", switch_ns_, "link", "add", "br0", "type", "bridge"});
    ip_or_throw({"-n", switch_ns_, "link", "set", "br0", "up"});
    for (std::size_t i = 0; i < hosts; ++i) {
      const std::string name = prefix_ + "h" + std::to_string(i);
      const std::string port = "h" + std::to_string(i);
      const std::string addr = net + std::to_string(i + 1);
      ip_or_throw({"netns", "add", name});
      created_.push_back(name);
      const std::string path = kNetnsDir + "/" + name;
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) throw NetnsUnavailable("open " + path + ": " + std::strerror(errno));
      fds_.push_back(fd);
      ip_or_throw({"-n", switch_ns_, "link", "add", port, "type", "veth", "peer", "name", "eth0",
                   "netns", name});
      ip_or_throw({"-n", switch_ns_, "link", "set", port, "master", "br0", "up"});
      ip_or_throw({"-n", name, "link", "set", "lo", "up"});
      ip_or_throw({"-n", name, "addr", "add", addr + "/24", "dev", "eth0"});
      ip_or_throw({"-n", name, "link", "set", "eth0", "up"});
      hosts_.emplace_back(name, addr, fd);
    }
  } catch (...) {
    remove_all();
    throw;
  }
}

NetnsCluster::~NetnsCluster() {
  remove_all();
}

void NetnsCluster::remove_all() noexcept {
  for (const int fd : fds_) ::close(fd);
  fds_.clear();
  hosts_.clear();
  // The switch first: its veth ends take the hosts' ends with them.
  for (const auto& name : created_) {
    try {
      run_ip({"netns", "delete", name});
    } catch (...) {  // noexcept: a name left behind is removed by the next run
    }
  }
  created_.clear();
}

std::unique_ptr<NetnsCluster> NetnsCluster::make(std::size_t hosts, std::string& why_not) {
  try {
    return std::make_unique<NetnsCluster>(hosts);
  } catch (const NetnsUnavailable& e) {
    why_not = e.what();
    return nullptr;
  }
}

void NetnsCluster::cut_link(std::size_t i, LinkEnd end) {
  const std::string error =
      end == LinkEnd::kHost
          ? run_ip({"-n", host(i).name(), "link", "set", "eth0", "down"})
          : run_ip({"-n", switch_ns_, "link", "set", "h" + std::to_string(i), "down"});
  if (!error.empty()) throw std::runtime_error("cut_link: " + error);
}

void NetnsCluster::restore_link(std::size_t i) {
  std::string error = run_ip({"-n", switch_ns_, "link", "set", "h" + std::to_string(i), "up"});
  if (error.empty()) error = run_ip({"-n", host(i).name(), "link", "set", "eth0", "up"});
  if (!error.empty()) throw std::runtime_error("restore_link: " + error);
}

}  // namespace ddp::test
