#pragma once
// Real hosts for multi-host tests, made of Linux network namespaces (needs root and `ip`).
//
// A NetnsCluster of N hosts is N+1 namespaces: host i has `lo` and `eth0` up, eth0 holding
// 10.X.Y.(i+1)/24 (X.Y from the test's pid); eth0 is one end of a veth pair whose other end,
// `h<i>`, is a port of the bridge `br0` in a switch namespace of its own. Nothing is added
// to the machine's own network, so clusters of concurrent test runs cannot see each other
// (namespace names carry the pid and a counter). The destructor deletes the namespaces,
// which takes every veth and the bridge with them; a crashed run's leftovers (names of a
// pid that no longer runs) are deleted by the next cluster made on the machine.
//
// Processes join a host through NetnsScope: while it lives, the calling thread is inside the
// host's network, so sockets it opens and children it spawns (fork, posix_spawn: AgentProcess,
// ChildProcess) are there; children keep the namespace for life, and their children too.
// cut_link() downs one end of a host's cable without telling anyone: open connections go
// half-open, as when a cable or a switch port fails. Only the network is per host: the hosts
// share the file system, the pid space (tests signal agents by pid) and the host name.
// Where the machine cannot make namespaces (not root, no `ip`, the kernel refuses),
// NetnsCluster::make says why and tests skip with that message:
//
//   std::string why_not;
//   auto cluster = NetnsCluster::make(3, why_not);  // nullptr: WARN("SKIPPED: " + why_not)
//   { const auto inside = cluster->host(1).enter(); /* spawn or connect from host 1 */ }
//   cluster->cut_link(2);  ...  cluster->restore_link(2);
//
// tests/e2e/cluster_job.hpp runs ddplaunch agents on the hosts; docs/multinode.md has more.
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddp::test {

// Thrown when the machine cannot host a cluster; what() names the command and its output.
class NetnsUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Moves the calling thread into a network namespace until destroyed (then back where it was).
// Not movable: the thread that entered must be the one that leaves.
class NetnsScope {
 public:
  explicit NetnsScope(int netns_fd);
  ~NetnsScope();
  NetnsScope(const NetnsScope&) = delete;
  NetnsScope& operator=(const NetnsScope&) = delete;

 private:
  int previous_fd_ = -1;
};

class NetnsHost {
 public:
  NetnsHost(std::string name, std::string addr, int fd)
      : name_(std::move(name)), addr_(std::move(addr)), fd_(fd) {}
  // The namespace's name, as `ip netns list` shows it (`ip -n <name> ...` reaches it).
  [[nodiscard]] const std::string& name() const { return name_; }
  // The host's IPv4 address on eth0, e.g. "10.27.4.2" (no prefix length).
  [[nodiscard]] const std::string& addr() const { return addr_; }
  // Puts the calling thread inside this host's network while the returned scope lives:
  //   { const auto inside = cluster.host(1).enter(); AgentProcess agent(...); }
  [[nodiscard]] NetnsScope enter() const { return NetnsScope(fd_); }

 private:
  std::string name_;
  std::string addr_;
  int fd_;  // open on /run/netns/<name>, owned by the cluster
};

class NetnsCluster {
 public:
  // Which end of a host's cable cut_link() takes down.
  enum class LinkEnd {
    // The host's eth0: its route to the others goes too, so its own new connects fail at once
    // (ENETUNREACH); established connections get no error on either side.
    kHost,
    // The bridge port: every packet to or from the host is dropped silently, on both sides
    // (a failed switch port or a partition); connects from the host time out.
    kSwitch,
  };

  // Makes `hosts` hosts; throws NetnsUnavailable (after removing what it made) when it cannot.
  explicit NetnsCluster(std::size_t hosts);
  // Deletes the namespaces (processes still inside keep theirs until they exit).
  ~NetnsCluster();
  NetnsCluster(const NetnsCluster&) = delete;
  NetnsCluster& operator=(const NetnsCluster&) = delete;

  // A cluster, or nullptr with the reason in why_not (for a skip message).
  static std::unique_ptr<NetnsCluster> make(std::size_t hosts, std::string& why_not);

  [[nodiscard]] std::size_t size() const { return hosts_.size(); }
  [[nodiscard]] const NetnsHost& host(std::size_t i) const { return hosts_.at(i); }
  // Takes one end of host i's cable down; throws std::runtime_error when `ip` fails.
  void cut_link(std::size_t i, LinkEnd end = LinkEnd::kHost);
  // Brings both ends of host i's cable up again (the address and route come back with it).
  void restore_link(std::size_t i);

 private:
  void remove_all() noexcept;

  std::string prefix_;  // ddptest-<pid>-<counter>-
  std::string switch_ns_;
  std::vector<NetnsHost> hosts_;
  std::vector<std::string> created_;  // namespaces to delete, in creation order
  std::vector<int> fds_;
};

}  // namespace ddp::test
