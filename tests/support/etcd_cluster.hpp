#pragma once
// Real etcd members for the etcd store's tests (Debian's etcd-server 3.4, scripts/setup.sh):
// each on free loopback ports with its own data dir, so tests never meet a system etcd on
// 2379 nor each other. The destructor stops whatever still runs (SIGTERM, then SIGKILL).
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

namespace ddp::test {

// Clients speak TLS to the members when cert_file is set (files in PEM); with client_ca_file
// the members also ask clients for a certificate signed by it.
struct EtcdTls {
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;
};

class EtcdCluster {
 public:
  // Starts `members` members forming one cluster and waits (up to timeout) until every one
  // answers GET /health with {"health":"true"} (it has a leader; over a plain metrics port
  // when clients speak TLS); throws naming the member and the tail of its log otherwise.
  explicit EtcdCluster(int members = 1,
                       std::chrono::milliseconds timeout = std::chrono::seconds(30),
                       EtcdTls tls = {});
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  [[nodiscard]] int size() const { return static_cast<int>(members_.size()); }
  // "127.0.0.1:<client port>" of member i.
  [[nodiscard]] std::string endpoint(int i) const;
  // Every member's endpoint, in order.
  [[nodiscard]] std::vector<std::string> endpoints() const;
  [[nodiscard]] uint16_t client_port(int i) const;
  // SIGTERM, then SIGKILL when it has not exited within grace.
  void stop(int i, std::chrono::milliseconds grace = std::chrono::seconds(5));
  // SIGKILL at once (a crashed member).
  void kill(int i);
  // Sends signo to member i (SIGSTOP: a member that accepts connections but never answers).
  void signal(int i, int signo);
  // True when member i answers /health with a leader right now.
  [[nodiscard]] bool healthy(int i) const;
  // Member i's captured output, for failure messages.
  [[nodiscard]] std::string log(int i) const;

  // The etcd binary (DDP_ETCD, else /usr/bin/etcd); throws when it is missing.
  static std::string binary();

 private:
  struct Member {
    std::string name;
    uint16_t client_port = 0;
    uint16_t peer_port = 0;
    uint16_t health_port = 0;  // client_port, or the metrics port when clients speak TLS
    std::unique_ptr<ChildProcess> child;
  };
  TempDir dir_;
  std::vector<Member> members_;
};

// A loopback TCP port nobody listens on now (bound to port 0, then released).
uint16_t free_loopback_port();

}  // namespace ddp::test
